"""`estimate` states the batch it used and warns (never errors) about inputs that are valid
but rarely meant (issue 12)."""
import json

from service.cli import main

BASE = ["estimate", "--model", "seed-70b", "--cluster", "seed-512", "--format", "json"]
SEED_TRAINING = {"tokens": 300e9, "seq_len": 8192, "global_batch_tokens": 4194304}


def run(capsys, training, layout):
    code = main([*BASE, "--training", json.dumps(training), "--layout", json.dumps(layout)])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code == 0 else None, err


def test_a_changed_batch_is_printed_and_warned(capsys):
    # DP 60 x mb 1 x 8,192 = 491,520 tokens per pass; 4,194,304 / 491,520 = 8.53 -> 9 passes
    # = 4,423,680 tokens, +5.5% over the target (the example)
    code, est, err = run(capsys, SEED_TRAINING, {"tp": 8, "dp": 60, "zero_stage": 1})
    assert code == 0 and est["batch"]["tokens_per_step"] == 4_423_680
    assert "warning: global batch: 4,423,680 tokens per step used, not the target 4,194,304 (+5.5%)" in err
    assert any(w.startswith("global batch: 4,423,680") for w in est["warnings"])


def test_the_seed_layout_gets_no_warning(capsys):
    code, est, err = run(capsys, SEED_TRAINING, {"tp": 8, "dp": 64, "zero_stage": 1,
                                                 "sequence_parallel": True, "recompute": "selective"})
    assert code == 0 and est["warnings"] == [] and "warning" not in err


def test_one_sequence_seq_len_one_and_a_cluster_beyond_the_batch(capsys):
    training = {"tokens": 1e6, "seq_len": 1, "global_batch_tokens": 1}
    code, est, _err = run(capsys, training, {"tp": 8, "dp": 1, "pp": 8})
    assert code == 0
    text = " | ".join(est["warnings"])
    assert "one sequence" in text and "seq_len is 1" in text
    assert "far beyond the batch's useful data parallelism (1 sequences per step)" in text
    assert "MFU" in text and "below 10%" in text  # one token per step cannot keep a GPU busy
