"""Every output states the attention-FLOP convention beside its MFU and gives both the causal
and the non-causal figure (issue 12); `plan` prints the sanity warnings (solver.sanity)."""
from __future__ import annotations

import json

import pytest

from service.cli import main

SEED = ["--model", "seed-70b", "--cluster", "seed-512"]
MFU_KEYS = ("mfu_causal", "mfu_noncausal", "mfu_attention_convention")


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _both(d: dict) -> None:
    """`d` carries both MFUs, `mfu` is the one its convention names, and causal < non-causal."""
    assert all(k in d for k in MFU_KEYS), sorted(d)
    conv = d["mfu_attention_convention"]
    assert d["mfu"] == pytest.approx(d["mfu_causal" if conv == "causal" else "mfu_noncausal"])
    assert d["mfu_causal"] < d["mfu_noncausal"]


def test_long_context_estimate_reports_both_conventions(capsys):
    """seed-70b at a 128k context: non-causal / causal MFU = (6N + A) / (6N + A/2), by hand:
    N = 69,500,936,192 -> 6N = 417,005,617,152 FLOPs per token; A = 12 S H dh L =
    12 x 131,072 x 64 x 128 x 80 = 1,030,792,151,040; ratio 1,447,797,768,192 /
    932,401,692,672 = 1.5528 (the issue's "1.55x at 128k")."""
    training = {"tokens": 1e9, "seq_len": 131072, "global_batch_tokens": 131072 * 64}
    layout = {"tp": 8, "cp": 8, "dp": 8, "zero_stage": 3, "sequence_parallel": True, "recompute": "full"}
    argv = ["estimate", *SEED, "--training", json.dumps(training), "--layout", json.dumps(layout)]
    code, out, _ = _run(capsys, [*argv, "--format", "json"])
    assert code == 0
    est = json.loads(out)
    _both(est)
    assert est["mfu_attention_convention"] == "non-causal"  # DESIGN.md's default convention
    assert est["mfu_noncausal"] / est["mfu_causal"] == pytest.approx(1.5528, abs=1e-4)
    code, md, _ = _run(capsys, [*argv, "--format", "md"])
    assert f"MFU {est['mfu']:.1%} (non-causal attention FLOPs; causal {est['mfu_causal']:.1%}" in md


def test_causal_training_flips_the_convention_in_use(capsys):
    training = {"tokens": 3e11, "seq_len": 8192, "global_batch_tokens": 4194304, "causal_attention_flops": True}
    layout = {"tp": 8, "dp": 64, "zero_stage": 1, "sequence_parallel": True}
    code, out, _ = _run(capsys, ["estimate", *SEED, "--training", json.dumps(training),
                                 "--layout", json.dumps(layout), "--format", "json"])
    est = json.loads(out)
    assert code == 0 and est["mfu_attention_convention"] == "causal"
    _both(est)


@pytest.fixture(scope="module")
def seed_plan_json(seed_plan_page) -> dict:
    return seed_plan_page[0]


def test_plan_json_and_markdown_carry_both_everywhere(seed_plan_json):
    from service.render_md import render_plan

    plan = seed_plan_json
    for d in [plan["prediction"], plan["ladder_choice"], *plan["layouts"],
              *[g for g in plan["validation_stages"][1]["grid"] if g.get("mfu") is not None]]:
        _both(d)
    assert plan["time"]["mfu_attention_convention"] == "non-causal"
    check = next(c for c in plan["failure_checks"] if c["check"] == "MFU below assumption")
    assert check["mfu_attention_convention"] == "non-causal"
    assert check["predicted_mfu_causal"] == pytest.approx(plan["prediction"]["mfu_causal"])
    md = render_plan(plan)
    p = plan["prediction"]
    assert f"MFU {p['mfu']:.1%} (non-causal attention FLOPs; causal {p['mfu_causal']:.1%}" in md
    assert "Wall time at 50% MFU (non-causal attention FLOPs)" in md
    assert "MFU, non-causal attention FLOPs | MFU, causal attention FLOPs" in md  # ranked table
    assert "predicted step time | MFU, non-causal attention FLOPs | MFU, causal attention FLOPs" in md  # grid
    assert f"non-causal attention FLOPs, causal: predicted {p['mfu_causal']:.1%}" in md  # failure check


def test_search_and_validate_json_carry_both(capsys, tmp_path):
    code, out, _ = _run(capsys, ["search", *SEED, "--training", "seed-300b", "--top", "2", "--format", "json"])
    assert code == 0
    for d in json.loads(out)["layouts"]:
        _both(d)
    code, md, _ = _run(capsys, ["search", *SEED, "--training", "seed-300b", "--top", "2", "--format", "md"])
    assert "MFU, non-causal attention FLOPs | MFU, causal attention FLOPs" in md
    assert "Memory in GB (GB = 1e9 bytes, GiB = 2^30 bytes); GPU capacity 80 GB (74.5 GiB)" in md  # seed GPU
    case = {"id": "seed", "model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
            "layout": {"tp": 8, "dp": 64, "zero_stage": 1, "sequence_parallel": True}}
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps(case) + "\n")
    code, out, _ = _run(capsys, ["validate", str(path), "--format", "json"])
    c = json.loads(out)["cases"][0]
    assert code == 0 and c["mfu_attention_convention"] == "non-causal"
    assert c["predicted_mfu"] == pytest.approx(c["predicted_mfu_noncausal"])
    assert c["predicted_mfu_noncausal"] > c["predicted_mfu_causal"]


def test_plan_prints_the_sanity_warnings_of_the_recommended_layout(capsys):
    """32 sequences per step on 64 nodes: 'a cluster far beyond the batch's useful DP'
    (solver.sanity.scale_warnings), in JSON, on stderr and in the Markdown."""
    training = json.dumps({"tokens": 3e11, "seq_len": 8192, "global_batch_tokens": 8192 * 32})
    code, out, err = _run(capsys, ["plan", *SEED, "--training", training, "--format", "json"])
    assert code == 0
    warnings = json.loads(out)["warnings"]
    assert any("far beyond the batch's useful data parallelism (32 sequences per step)" in w for w in warnings)
    assert [f"warning: {w}" for w in warnings] == [ln for ln in err.splitlines() if ln.startswith("warning:")]
    from service.render_md import render_plan

    assert f"**Warning**: {warnings[0]}" in render_plan(json.loads(out))


def test_the_seed_plan_has_no_warning(seed_plan_json):
    assert seed_plan_json["warnings"] == []
