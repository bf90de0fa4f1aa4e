"""benchmarks/data/memory_runs.jsonl (published peak memory per GPU) and the memory error that
`trainplan validate` reports beside the step-time error."""
import json
import re
from pathlib import Path

import pytest

from service.cli import main
from solver.cost.validation import (PEAK_MEMORY_KINDS, CaseResult, memory_summary,
                                    predicted_peak_memory_bytes, validate_lines)

MEMORY_RUNS = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "memory_runs.jsonl"
FRAMEWORKS = ("megatron-core", "torchtitan", "deepspeed")


def memory_rows():
    return [json.loads(t) for t in MEMORY_RUNS.read_text().splitlines() if t.strip()]


def framework(row):
    return row["training"]["framework"]


def test_memory_runs_are_published_runs_from_two_frameworks():
    rows = memory_rows()
    assert len(rows) >= 15 and len({r["id"] for r in rows}) == len(rows)
    assert all(framework(r) in FRAMEWORKS for r in rows)
    assert len({framework(r) for r in rows}) >= 2
    for r in rows:
        # Every row names its table/file and the commit it was read at, and lists what the
        # source did not print (the measurement's kind and unit first of all).
        assert re.search(r"[0-9a-f]{10,40}", r["source"]), r["id"]
        assert r["confidence"] in ("high", "medium", "low") and r["assumed"], r["id"]
        m = r["measured"]
        assert m["peak_memory_kind"] in PEAK_MEMORY_KINDS and m["peak_memory_bytes"] > 1e9, r["id"]
        assert any("peak_memory_kind" in a for a in r["assumed"]), r["id"]


def test_gib_figures_are_converted_to_bytes():
    # torchtitan prints GiB: 82.4 GiB (benchmarks/llama3_h100_202412_torchtitan.md, Table 1,
    # FSDP row) = 82.4 x 1,073,741,824 = 88,476,326,297.6 -> 88,476,326,298 bytes, not 82.4e9.
    row = next(r for r in memory_rows() if r["id"] == "torchtitan_h100_8b_fsdp8_eager")
    assert row["measured"]["peak_memory_printed"] == "82.4 GiB"
    assert row["measured"]["peak_memory_bytes"] == 88_476_326_298


def test_every_memory_run_evaluates():
    result = validate_lines(MEMORY_RUNS.read_text().splitlines())
    assert result["errors"] == []
    assert result["summary"]["memory"]["measured_cases"] == len(memory_rows())


def test_predicted_peak_in_the_measurements_scope():
    memory = {"total": 50e9, "framework_overhead": 3e9}
    assert predicted_peak_memory_bytes(memory, "max_allocated") == 47e9
    assert predicted_peak_memory_bytes(memory, "max_reserved") == 47e9
    assert predicted_peak_memory_bytes(memory, "device_used") == 50e9


def _case(case_id, predicted, measured):
    return CaseResult(id=case_id, predicted_step_time_s=1.0, measured_step_time_s=None, error=None,
                      fits=True, memory_per_gpu_bytes_total=predicted, predicted_mfu=0.5,
                      measured_mfu=None, time_breakdown_s={}, defaulted=[],
                      peak_memory_kind=None if measured is None else "max_reserved",
                      predicted_peak_memory_bytes=predicted if measured else None,
                      measured_peak_memory_bytes=measured,
                      memory_error=None if measured is None else predicted / measured - 1)


def test_memory_summary_by_hand():
    # Errors +10%, -20%, +5% (predicted 55/40/63 GB against 50/50/60 GB); one case unmeasured.
    # |errors| 0.10, 0.20, 0.05 -> median 0.10, max 0.20 (b), mean signed (0.10-0.20+0.05)/3
    # = -0.05/3; the largest under-prediction is b's 20%: at a 20% margin b (predicted 40 GB,
    # measured 50) is said to fit a 50 GB GPU exactly when it does.
    s = memory_summary([_case("a", 55e9, 50e9), _case("b", 40e9, 50e9), _case("c", 63e9, 60e9),
                        _case("d", 70e9, None)])
    assert s["measured_cases"] == 3 and s["worst_case"] == "b"
    assert s["median_abs_error"] == pytest.approx(0.10)
    assert s["max_abs_error"] == pytest.approx(0.20)
    assert s["mean_signed_error"] == pytest.approx(-0.05 / 3)
    assert s["max_under_prediction"] == pytest.approx(0.20)
    assert s["kinds"] == {"max_reserved": 3}
    assert memory_summary([_case("a", 55e9, 50e9)])["max_under_prediction"] == 0.0
    assert memory_summary([_case("d", 70e9, None)]) == {"measured_cases": 0}


ROW = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
       "layout": {"tp": 8, "dp": 64, "zero_stage": 1, "sequence_parallel": True, "recompute": "selective"}}


def _write(tmp_path, rows):
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_validate_reports_memory_beside_step_time(tmp_path, capsys):
    rows = [{"id": "time", **ROW, "measured": {"step_time_s": 10.0}},
            {"id": "memory", **ROW, "measured": {"peak_memory_bytes": 60e9, "peak_memory_kind": "device_used"}},
            {"id": "both", **ROW, "measured": {"step_time_s": 10.0, "peak_memory_bytes": 60e9,
                                                "peak_memory_kind": "max_allocated"}}]
    assert main(["validate", _write(tmp_path, rows), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    time_only, memory_only, both = out["cases"]
    assert time_only["memory_error"] is None and time_only["error"] is not None
    assert memory_only["error"] is None
    assert memory_only["memory_error"] == memory_only["memory_per_gpu_bytes_total"] / 60e9 - 1
    # The allocator figure is compared without the CUDA context / NCCL share (3 GB by default).
    assert both["predicted_peak_memory_bytes"] == pytest.approx(both["memory_per_gpu_bytes_total"] - 3e9)
    assert out["summary"]["measured_cases"] == 2 and out["summary"]["memory"]["measured_cases"] == 2
    assert main(["validate", _write(tmp_path, rows), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "| memory error |" in md and "median |memory error|" in md
    assert f"{memory_only['memory_error'] * 100:+.1f}%" in md


def test_validate_rejects_a_peak_without_its_kind(tmp_path, capsys):
    rows = [{"id": "nokind", **ROW, "measured": {"peak_memory_bytes": 60e9}},
            {"id": "badkind", **ROW, "measured": {"peak_memory_bytes": 60e9, "peak_memory_kind": "GiB"}},
            {"id": "kindonly", **ROW, "measured": {"peak_memory_kind": "max_allocated"}},
            {"id": "negative", **ROW, "measured": {"peak_memory_bytes": -1, "peak_memory_kind": "max_allocated"}}]
    assert main(["validate", _write(tmp_path, rows)]) == 2
    err = capsys.readouterr().err
    assert "line 1: measured.peak_memory_kind: expected one of max_allocated, max_reserved, device_used" in err
    assert "line 2: measured.peak_memory_kind: expected one of" in err and "got 'GiB'" in err
    assert "line 3: measured.peak_memory_kind: given without measured.peak_memory_bytes" in err
    assert "line 4: measured.peak_memory_bytes: expected a positive number" in err


def test_megatron_core_runs_meet_the_memory_target():
    # The target, median |memory error| <= 8%, on the runs of the framework whose
    # recipe the model implements (Megatron-Core: 6 + 12/d bytes/param with the distributed
    # optimizer, dropout counted, interleaved in-flight capped at m, 6 bytes per logit at the
    # unfused loss). The four functional-test runs come out at -0.1/+0.2/-0.9/-2.8%, median
    # 0.6% (-3.7/-3.4/-2.8/-4.6% at 4 bytes per logit); under the seed's 12-byte recipe
    # they were at -13.7/-13.4/-22.3/-23.7% (median 18%).
    lines = [t for t in MEMORY_RUNS.read_text().splitlines()
             if t.strip() and framework(json.loads(t)) == "megatron-core"]
    memory = validate_lines(lines)["summary"]["memory"]
    assert memory["measured_cases"] == 4
    assert memory["median_abs_error"] <= 0.08


def test_the_whole_memory_set_meets_the_target():
    # Issue 10: median |memory error| <= 8% over every published run with a measured peak
    # (26 runs, three frameworks). With torchtitan's FSDP2 LM-head unit and all-gather stream
    # pool, its vocab-parallel loss under TP, the interleaved in-flight cap and the Trainy rows'
    # compiled loss: 6.6% overall, torchtitan 7.5% (README "Measured peak memory per GPU";
    # was 10.4% / 15.0%); 7.1% overall once DeepSpeed ZeRO-3 gathers the LM head whole; 4.3%,
    # torchtitan 4.5%, with FSDP2's FP32 reduce-scatter copy (state.reduce_scatter_bytes).
    memory = validate_lines(MEMORY_RUNS.read_text().splitlines())["summary"]["memory"]
    assert memory["measured_cases"] == 26
    assert memory["median_abs_error"] <= 0.08
    torchtitan = [t for t in MEMORY_RUNS.read_text().splitlines()
                  if t.strip() and framework(json.loads(t)) == "torchtitan"]
    assert validate_lines(torchtitan)["summary"]["memory"]["median_abs_error"] <= 0.08
