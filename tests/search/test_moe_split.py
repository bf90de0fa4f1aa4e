"""MoE first/last pipeline splits in the search (solver.search.moe_split): the candidates are
the splits Megatron-LM's --decoder-first/last-pipeline-num-layers accept, the chosen one is the
fastest of them under the estimate, CP-SAT equals the exhaustive oracle on MoE models whose
layers do not divide, and the rank-1 layout exports and passes Megatron's checks.
"""
from __future__ import annotations

import pytest

from solver.cost.estimate import estimate_layout
from solver.presets import load_model, load_training
from solver.search import exhaustive_search, search_layouts
from solver.search.moe_split import applies, candidates
from solver.search.options import SearchOptions
from solver.specs import LayoutSpec
from tests.search.test_experts import SMALL, moe_model, training
from tests.search.test_experts_cost import cluster
from topology.catalog import load_cluster

OPT = {"split_stages": True, **SMALL}


def dsv3_shaped(layers: int = 7):
    """A DeepSeek-V3-shaped tiny model: a first dense layer, a shared expert, one MTP module."""
    base = moe_model(layers=layers)
    assert base.moe is not None
    return base.model_copy(update={"mtp_layers": 1, "moe": base.moe.model_copy(
        update={"shared_experts": 1, "first_dense_layers": 1})})


def test_candidates_are_the_splits_megatron_accepts():
    # transformer_config.py L2294-2355 (d98e8a64): first, last >= 1; the pp - 2 middle stages
    # share the rest equally, >= 1 each. 7 layers on 4 stages: middle 1 -> first + last = 5
    # (1+4, 2+3, 3+2, 4+1); middle 2 -> first + last = 3 (1+2, 2+1); middle 3 leaves 1: none.
    got = sorted((f, c, last) for f, c, last in candidates(7, 4))
    assert got == [(1, 1, 4), (1, 2, 2), (2, 1, 3), (2, 2, 1), (3, 1, 2), (4, 1, 1)]
    assert sorted(candidates(3, 2)) == [(1, 0, 2), (2, 0, 1)]


def untied_moe(layers: int = 7):
    """dsv3_shaped without MTP and with an LM head of its own: torchtitan runs neither MTP nor
    tied embeddings at pp > 1 (solver.frameworks.models)."""
    return dsv3_shaped(layers).model_copy(update={"mtp_layers": 0, "tied_embeddings": False})


def test_megatron_and_torchtitan_only_when_the_layers_do_not_divide():
    m = dsv3_shaped()
    assert applies(m, training("megatron-core"), True, 2, 1)
    assert applies(untied_moe(), training("torchtitan"), True, 2, 1)  # module_fqns_per_model_part
    assert not applies(m, training("deepspeed"), True, 2, 1)  # keeps the even rule
    assert not applies(m, training("megatron-core"), False, 2, 1)
    assert not applies(moe_model(layers=8), training("megatron-core"), True, 2, 1)  # divides


def test_chosen_split_is_the_fastest_megatron_split_of_the_published_layout():
    """DeepSeek-V3's published layout (PP16, EP64) gets [4] x 15 + [1], the split its recipe
    states (--decoder-first/last-pipeline-num-layers 4/1), and no split the flags accept is
    faster under the estimate (every candidate estimated separately)."""
    from solver.cost.estimate import make_context
    from solver.search.exhaustive import with_search_split

    m, c, t = load_model("deepseek-v3"), load_cluster("h800-2048"), load_training("deepseek-v3-14.8t")
    lo = LayoutSpec(tp=1, pp=16, dp=128, ep=64, etp=1, zero_stage=1, micro_batch=1, recompute="selective",
                    sequence_parallel=False)
    split = with_search_split(make_context(m, c, t), SearchOptions(split_stages=True), lo).pipeline_layers
    assert split == (4,) * 15 + (1,)
    best = estimate_layout(m, c, t, lo.model_copy(update={"pipeline_layers": split})).step_time_s
    for f, mid, last in candidates(61, 16):
        other = lo.model_copy(update={"pipeline_layers": (f, *[mid] * 14, last)})
        assert best <= estimate_layout(m, c, t, other).step_time_s * (1 + 1e-12)


def _objectives(model, clu, train, options):
    oracle = exhaustive_search(model, clu, train, options)
    res = search_layouts(model, clu, train, options, explain=False)
    return res, oracle


@pytest.mark.parametrize("flag", ["split_stages", "plan_default"])
@pytest.mark.parametrize("memory_gb", [80, 3.5])
def test_cpsat_equals_oracle_with_moe_first_last_splits(memory_gb, flag):
    """7 layers on 8 GPUs: every pp > 1 layout is split unevenly (pp 2, 4; pp 2 with vpp 2 as 4
    chunks); with little memory the split layouts' busiest rank decides what fits. Asked for
    with split_stages, and by a plan's default options (solver.search.api.plan_options:
    moe_splits), where the split bounds (moe_split.fitting_lower_s, may_fit) drop groups."""
    from solver.search.api import plan_options

    model, clu, train = dsv3_shaped(), cluster(2, 4, memory_gb=memory_gb), training(batch_seqs=16)
    options = SearchOptions(top_k=5, **OPT) if flag == "split_stages" else plan_options({"top_k": 5, **SMALL})
    assert flag == "split_stages" or (options.moe_splits and not options.split_stages)
    res, oracle = _objectives(model, clu, train, options)
    got = [r.objective_units for r in res.layouts]
    assert got and got == pytest.approx([e.objective_units for e in oracle][:5], rel=1e-12)
    split = [e for e in oracle if e.layout.pp > 1]
    assert split and all(e.layout.pipeline_layers is not None and sum(e.layout.pipeline_layers) == 7
                         for e in split)  # not vacuous: split layouts are ranked
    for r in res.layouts:  # each ranked layout's split is the evaluator's
        est = estimate_layout(model, clu, train, r.layout)
        assert est.fits and est.step_time_s == pytest.approx(r.estimate.step_time_s, rel=1e-12)


def test_cpsat_equals_oracle_with_torchtitan_first_last_splits():
    """The same on torchtitan (its ZeRO stages under PP, 0 and 1, and its interleaving rule)."""
    model, clu, train = untied_moe(), cluster(2, 4), training("torchtitan", batch_seqs=16)
    res, oracle = _objectives(model, clu, train, SearchOptions(top_k=5, **OPT))
    assert [r.objective_units for r in res.layouts] == pytest.approx([e.objective_units for e in oracle][:5],
                                                                     rel=1e-12)
    assert any(e.layout.pp > 1 and e.layout.pipeline_layers is not None for e in oracle)


def test_rank1_split_layout_exports_and_passes_megatron_checks():
    from service.launchers import export_layout, rank_placement
    from tests.service.framework_options import megatron_violations

    model, clu, train = dsv3_shaped(), cluster(2, 4), training(batch_seqs=16)
    res = search_layouts(model, clu, train, SearchOptions(top_k=20, **OPT), explain=False)
    split = [r.layout for r in res.layouts if r.layout.pp > 1]
    assert split
    for lo in split[:3]:
        args = export_layout("megatron-core", model, train, lo, rank_placement(clu, lo),
                             list(lo.pipeline_layers))["args"]
        assert megatron_violations(args) == [], lo


def test_torchtitan_split_layouts_export_their_chunks_and_pass_its_checks():
    """torchtitan ranks split layouts too (1F1B and Interleaved1F1B), and the export's
    module_fqns_per_model_part holds the split the estimate charged, chunk by chunk, with
    tok_embeddings in chunk 0 (rank 0) and norm + lm_head in the last (rank pp - 1): where
    solver.cost.moe_stages charges them (torchtitan b5bcd76c pipeline_parallel.py L532-569: stage
    s on rank s mod pp)."""
    from service.launchers import export_layout, rank_placement
    from tests.service.framework_options import torchtitan_violations
    from tests.service.framework_semantics import torchtitan_mismatches

    model, clu, train = untied_moe(), cluster(2, 4), training("torchtitan", batch_seqs=16)
    res = search_layouts(model, clu, train, SearchOptions(top_k=20, **OPT), explain=False)
    split = [r for r in res.layouts if r.layout.pp > 1]
    assert {r.layout.vpp for r in split} == {1, 2}  # both schedules among them
    for r in split:
        lo = r.layout
        assert lo.pipeline_layers is not None and sum(lo.pipeline_layers) == 7
        launch = export_layout("torchtitan", model, train, lo, rank_placement(clu, lo), list(lo.pipeline_layers))
        parts = launch["settings"]["parallelism"]["module_fqns_per_model_part"]
        assert [sum(n.startswith("layers.") for n in p) for p in parts] == list(lo.pipeline_layers)
        assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
        assert (len(parts) - 1) % lo.pp == lo.pp - 1
        assert torchtitan_violations(launch["settings"], model.layers, lo.gpus) == []
        assert torchtitan_mismatches(model, train, lo, r.estimate.as_dict(), launch) == []


def test_torchtitan_never_splits_what_it_cannot_run_at_pp_above_one():
    """Tied embeddings (decoder.py Decoder.Config.update_from_config L168-171 raises) keep
    torchtitan at pp 1, split or not; Megatron-Core splits the same tied model."""
    tied = untied_moe().model_copy(update={"tied_embeddings": True})
    for model, framework, pps in ((tied, "torchtitan", {1}), (tied, "megatron-core", {1, 2, 4})):
        res = search_layouts(model, cluster(2, 4), training(framework, batch_seqs=16),
                             SearchOptions(top_k=50, **OPT), explain=False)
        assert {r.layout.pp for r in res.layouts} <= pps and 1 in pps, (framework, model.tied_embeddings)
    assert 2 in {r.layout.pp for r in res.layouts}  # not vacuous: Megatron splits it


def test_group_bound_is_below_every_split_layout():
    """solver.search.prune's step-time lower bound (moe_split.lower_step_s for groups with
    first/last splits) is below every layout of the group, with the split the evaluator gives."""
    from solver.cost.estimate import make_context
    from solver.search.cpsat import LayoutModel
    from solver.search.exhaustive import with_search_split
    from solver.search.model import layout_of, pipe_group
    from solver.search.prune import _lower_s
    from solver.search.rules import accumulation
    from solver.search.terms import _Terms
    from solver.search.moe_split import rule

    model, clu, train = dsv3_shaped(), cluster(2, 4), training(batch_seqs=16)
    options = SearchOptions(**OPT)
    lm = LayoutModel(model, clu, train, options)
    ctx = make_context(model, clu, train)
    t = _Terms(ctx)
    t.first_last = rule(model, train, True)
    groups: dict = {}
    for key in lm.pipeline_rows():
        groups.setdefault(pipe_group(key), []).append(key)
    acc = lambda dp, mb: accumulation(train, dp, mb)  # noqa: E731
    checked = 0
    for g, keys in groups.items():
        tp, pp, cp, dp, sp, mb, ep, etp = g
        bound = _lower_s(lm, t, g, keys, acc)
        for key in keys:
            lo = with_search_split(ctx, options, layout_of(key, (tp, pp, cp, dp, sp, 1, mb, ep, etp)))
            checked += lo.pipeline_layers is not None
            assert bound <= estimate_layout(model, clu, train, lo).step_time_s * (1 + 1e-12), lo
    assert checked


def test_plans_search_moe_splits_unless_told_and_dense_plans_are_unchanged(seed_model, seed_cluster,
                                                                          seed_training):
    """plan_options turns moe_splits on unless the options state it; a dense model's search is
    the same with it (moe_split.rule is None for dense models)."""
    from solver.search.api import plan_options

    assert plan_options(None).moe_splits and plan_options({"top_k": 3}).moe_splits
    assert not plan_options({"moe_splits": False}).moe_splits
    assert not SearchOptions().moe_splits  # search and /v1/layouts: off (latency, README)
    plain = search_layouts(seed_model, seed_cluster, seed_training, {"top_k": 5}, explain=False)
    split = search_layouts(seed_model, seed_cluster, seed_training, plan_options({"top_k": 5}), explain=False)
    assert [r.layout for r in split.layouts] == [r.layout for r in plain.layouts]
    assert [r.objective_units for r in split.layouts] == [r.objective_units for r in plain.layouts]


def test_cli_moe_splits_flags():
    """`search --moe-splits` asks for the splits (off without it); `plan --no-moe-splits` parses and
    is on by default (the plan's search then goes through plan_options)."""
    from service.cli import build_parser
    from service.commands.search import options_from_args

    base = ["--model", "deepseek-v3", "--cluster", "h800-2048", "--training", "deepseek-v3-14.8t"]
    parser = build_parser()
    assert options_from_args(parser.parse_args(["search", *base, "--moe-splits"]))["moe_splits"] is True
    assert options_from_args(parser.parse_args(["search", *base]))["moe_splits"] is False
    assert parser.parse_args(["plan", *base]).moe_splits is True
    assert parser.parse_args(["plan", *base, "--no-moe-splits"]).moe_splits is False
