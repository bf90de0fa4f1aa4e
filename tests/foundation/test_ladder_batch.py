"""The seed ladder respects the global batch (issue 12): with fewer sequences per step than
the GPUs left after TP x PP, DP is capped at the sequences (the other GPUs stay idle) instead
of silently growing the batch; a layout with nothing to rank it among is not "ranked 1 of 0"."""
import json

from service.cli import main
from solver.plan import ladder_layouts
from solver.presets import load_model, load_training
from topology.catalog import load_cluster

TINY = {"tokens": 1e9, "seq_len": 8192, "global_batch_tokens": 8192}  # one sequence per step


def test_ladder_dp_is_capped_at_the_batchs_sequences():
    ladder, fitting = ladder_layouts(load_model("seed-70b"), load_cluster("seed-512"), load_training(TINY))
    chosen = fitting[0]
    # 8,192 tokens / 8,192 tokens per sequence = 1 sequence: one replica, micro-batch 1, so the
    # ladder's batch is exactly the target (main gave DP 64: 64 x 8,192 = 524,288 tokens).
    assert chosen["dp"] == 1 and chosen["micro_batch"] == 1
    assert chosen["dp"] * chosen["micro_batch"] * TINY["seq_len"] == TINY["global_batch_tokens"]
    assert "capped at the global batch's 1 sequences" in ladder["dp_reason"]
    assert f"{512 - chosen['gpus']:,} of 512 GPUs stay idle" in ladder["dp_reason"]


def test_seed_ladder_is_unchanged_when_the_batch_is_large_enough():
    training = load_training("seed-300b")  # 4,194,304 / 8,192 = 512 sequences >= DP 64
    ladder, fitting = ladder_layouts(load_model("seed-70b"), load_cluster("seed-512"), training)
    assert (fitting[0]["tp"], fitting[0]["pp"], fitting[0]["dp"]) == (8, 1, 64)
    assert ladder["dp_reason"].startswith("the remaining GPUs")


def test_plan_with_a_tiny_batch_never_ranks_among_zero_layouts(capsys, tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    argv = ["plan", "--model", "seed-70b", "--cluster", "seed-512", "--training", str(path)]
    assert main([*argv, "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    choice = plan["ladder_choice"]
    assert "rank_min" not in choice or choice["fitting_layouts"] > 0
    assert choice["batch"]["dp"] * choice["batch"]["micro_batch"] * choice["batch"]["grad_accum"] == 1
    assert main([*argv, "--format", "md"]) == 0
    assert "of 0 fitting layouts" not in capsys.readouterr().out
