"""--framework on plan/search/estimate and the search-space flags: bad values exit 2 naming
the flag; the framework reaches every layout of the output."""
from __future__ import annotations

import json

import pytest

from service.cli import main

SEED = ["--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b"]


@pytest.mark.parametrize("flag, value", [("--zero-stages", "0,4"), ("--recompute", "some"),
                                         ("--max-vpp", "0"), ("--max-cp", "x"),
                                         ("--max-micro-batch", "2000"), ("--orders", "dp-tp"),
                                         ("--framework", "jax")])
def test_bad_search_flag_exits_2_naming_it(capsys, flag, value):
    with pytest.raises(SystemExit) as exc:
        main(["search", *SEED, flag, value])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


def test_search_flags_restrict_the_space_and_name_the_framework(capsys):
    code = main(["search", *SEED, "--framework", "deepspeed", "--zero-stages", "0,1", "--recompute",
                 "selective,full", "--max-vpp", "2", "--max-cp", "1", "--max-micro-batch", "2",
                 "--orders", "tp-cp-dp-pp", "--top", "3", "--time-limit", "20"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["layouts"]
    for lay in out["layouts"]:
        assert lay["framework"] == "deepspeed" and lay["estimate"]["framework"] == "deepspeed"
        assert lay["zero_stage"] in (0, 1) and lay["recompute"] in ("selective", "full")
        assert lay["vpp"] == 1 and lay["cp"] == 1 and not lay["sequence_parallel"]  # DeepSpeed rules
        assert lay["micro_batch"] <= 2


def test_estimate_warns_loudly_on_a_layout_the_framework_cannot_run(capsys):
    layout = json.dumps({"tp": 4, "pp": 2, "vpp": 8, "dp": 64, "zero_stage": 2, "sequence_parallel": True})
    code = main(["estimate", *SEED, "--layout", layout, "--framework", "megatron-core", "--format", "md"])
    out, err = capsys.readouterr()
    assert code == 0
    assert "NOT RUNNABLE" in err and "zero_stage" in err and "NVIDIA/Megatron-LM" in err
    assert "**NOT RUNNABLE in megatron-core**" in out
