"""`trainplan validate`: per-case rows, summary, per-line errors, exit codes."""
import json

from service.cli import main

LAYOUT = {"tp": 8, "dp": 64, "zero_stage": 1, "sequence_parallel": True, "recompute": "selective"}


def write(tmp_path, rows):
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_validate_json(tmp_path, capsys):
    inline_cluster = {"name": "c", "nodes": 64, "gpus_per_node": 8,
                      "gpu": {"name": "g", "memory_gb": 80, "peak_tflops": 1000, "hbm_gb_s": 3350},
                      "intra_node": {"bandwidth_gb_s": 450, "latency_us": 3},
                      "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}}
    rows = [{"id": "a", "model": "seed-70b", "cluster": "seed-512",
             "training": {"seq_len": 8192, "global_batch_tokens": 4194304},
             "layout": LAYOUT, "measured": {"step_time_s": 10.0}, "source": "x"},
            {"id": "b", "model": "seed-70b", "cluster": inline_cluster, "training": "seed-300b",
             "layout": LAYOUT}]
    assert main(["validate", write(tmp_path, rows), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    a, b = out["cases"]
    assert a["id"] == "a" and a["measured_step_time_s"] == 10.0
    assert a["error"] == a["predicted_step_time_s"] / 10.0 - 1
    assert {"fits", "memory_per_gpu_bytes_total", "predicted_step_time_s"} <= set(a)
    assert b["error"] is None and b["predicted_step_time_s"] == a["predicted_step_time_s"]
    assert out["summary"]["measured_cases"] == 1
    assert out["summary"]["median_abs_error"] == abs(a["error"])


def test_validate_bad_lines_are_reported_per_line(tmp_path, capsys):
    rows = ["{not json", {"id": "x", "model": "nope", "cluster": "seed-512", "training": "seed-300b",
                          "layout": LAYOUT},
            {"id": "y", "model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
             "layout": {"tp": 3}},
            {"id": "z", "model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
             "layout": LAYOUT, "measured": {"step_time_s": -1}},
            {"id": "ok", "model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
             "layout": LAYOUT}]
    assert main(["validate", write(tmp_path, rows), "--format", "md"]) == 2
    captured = capsys.readouterr()
    assert "| ok |" in captured.out
    err = captured.err
    assert "line 1: not valid JSON" in err
    assert "line 2: model: unknown preset 'nope'" in err
    assert "line 3: layout.tp: 3 does not divide model.heads" in err
    assert "line 4: measured.step_time_s: expected a positive number" in err


def test_validate_missing_file(capsys):
    assert main(["validate", "/nonexistent/cases.jsonl"]) == 2
    assert "cases: cannot read" in capsys.readouterr().err


def test_validate_names_the_software_defaults_it_scored(tmp_path, capsys):
    rows = [{"id": "bare", "model": "seed-70b", "cluster": "seed-512",
             "training": {"seq_len": 8192, "global_batch_tokens": 4194304}, "layout": LAYOUT,
             "measured": {"step_time_s": 9.0}},
            {"id": "stated", "model": "seed-70b", "cluster": "seed-512",
             "training": {"seq_len": 8192, "global_batch_tokens": 4194304, "attention_kernel": "unfused"},
             "layout": LAYOUT, "measured": {"step_time_s": 9.0}},
            {"id": "preset", "model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
             "layout": LAYOUT}]
    assert main(["validate", write(tmp_path, rows), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    bare, stated, preset = out["cases"]
    assert "training.attention_kernel=flash" in bare["defaulted"]
    assert not any(d.startswith("training.attention_kernel") for d in stated["defaulted"])
    assert preset["defaulted"] == []
    assert out["summary"]["defaulted"]["training.attention_kernel=flash"] == 1
    # The unfused kernel moves the S x S scores through HBM: the stated run is slower.
    assert stated["predicted_step_time_s"] > bare["predicted_step_time_s"]
    assert main(["validate", write(tmp_path, rows), "--format", "md"]) == 0
    md = capsys.readouterr().out
    assert "1 case(s) do not state training.attention_kernel and were scored with flash." in md
    assert 'attention_kernel: "unfused"' in md
