"""`trainplan export` without --layout exports the plan's rank 1: the layout `trainplan plan`
ranks first with the same inputs (its search options: both rank orders on an explicit fabric,
MoE first/last splits on) and the plan's `launch`, not the plain search's rank 1."""
from __future__ import annotations

import json

import pytest

from service.cli import main
from solver.plan import layout_fields
from solver.specs import LayoutSpec
from tests.search.test_experts import training
from tests.search.test_experts_cost import cluster
from tests.search.test_moe_split import untied_moe
from topology.catalog import load_cluster


def _run(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _problem(model, clu, train) -> list[str]:
    return ["--model", model.model_dump_json(), "--cluster", clu.model_dump_json(),
            "--training", train.model_dump_json()]


def _plan_and_export(capsys, inputs: list[str], *flags: str) -> tuple[dict, dict]:
    plan = _run(capsys, ["plan", *inputs, *flags, "--format", "json"])
    export = _run(capsys, ["export", *inputs, *flags])
    return plan, export


def _assert_export_is_plans_rank1(plan: dict, export: dict) -> None:
    rank1 = LayoutSpec.model_validate(layout_fields(plan["layouts"][0]), strict=False).model_dump(mode="json")
    assert export["layout_source"] == "plan" and export["layout"] == rank1
    assert export["pipeline_split"] == plan["layouts"][0].get("pipeline_split")
    launch = {k: v for k, v in plan["launch"].items() if k not in ("framework", "rank", "placement")}
    assert "refused" not in launch and export["launch"] == launch
    assert export["placement"] == {k: v for k, v in plan["launch"]["placement"].items() if k != "ranks"}


def test_moe_export_is_the_plans_split_rank1_not_the_plain_searchs(capsys):
    """A 7-layer MoE on torchtitan, 2 x 4 GPUs: the plan's MoE splits rank PP2 with 4 + 3
    layers (interleaved chunks 2, 2, 2, 1) first; without splits (`trainplan search`'s default,
    and the plan with --no-moe-splits) rank 1 is PP1. Export follows each plan."""
    train = training("torchtitan", batch_seqs=16)
    inputs = _problem(untied_moe(), cluster(2, 4), train)
    plan, export = _plan_and_export(capsys, inputs)
    _assert_export_is_plans_rank1(plan, export)
    assert export["layout"]["pp"] == 2 and export["pipeline_split"] == [4, 3]  # the split decided rank 1
    plain_plan, plain_export = _plan_and_export(capsys, inputs, "--no-moe-splits")
    _assert_export_is_plans_rank1(plain_plan, plain_export)
    assert plain_export["layout"]["pp"] == 1
    searched = _run(capsys, ["export", *inputs, "--from", "search"])
    assert searched["layout_source"] == "search" and searched["layout"] == plain_export["layout"]


@pytest.mark.parametrize("framework", ["megatron-core", "deepspeed"])
def test_dense_export_is_the_plans_rank1(capsys, framework):
    """A dense model (Llama 3 8B on 4 rail-optimized DGX H100 nodes, 2 per leaf: an explicit fabric, where the
    plan searches both rank orders): export == the plan's rank 1 == its launch."""
    clu = load_cluster("dgx-h100-superpod-rail-optimized")
    clu = clu.model_copy(update={"nodes": 4, "topology": clu.topology.model_copy(update={"nodes_per_leaf": 2})})
    inputs = ["--model", "llama3-8b", "--cluster", clu.model_dump_json(), "--training", "seed-300b",
              "--framework", framework]
    plan, export = _plan_and_export(capsys, inputs)
    _assert_export_is_plans_rank1(plan, export)


def test_markdown_says_the_layout_is_the_plans_rank1(capsys):
    inputs = _problem(untied_moe(), cluster(2, 4), training("torchtitan", batch_seqs=16))
    assert main(["export", *inputs, "--format", "md"]) == 0
    assert "Layout (the plan's rank 1, as `trainplan plan` ranks it)" in capsys.readouterr().out


def test_flags_that_choose_the_layout_are_refused_with_a_given_layout(capsys):
    """--from / --moe-splits / --profile only choose the layout: with --layout they exit 2
    naming the flag instead of being ignored."""
    layout = '{"tp": 8, "dp": 64, "zero_stage": 1, "sequence_parallel": true}'
    seed = ["--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b", "--layout", layout]
    for flags, named in ((["--from", "search"], "--from"), (["--no-moe-splits"], "--moe-splits/--no-moe-splits")):
        assert main(["export", *seed, *flags]) == 2
        assert f"error: {named}: chooses the layout" in capsys.readouterr().err
