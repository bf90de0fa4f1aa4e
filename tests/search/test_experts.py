"""Expert parallelism in the search space: EP and ETP folded onto TP x CP x DP, each
framework's expert rules, and CP-SAT equal to the exhaustive oracle on MoE problems.

The cost here is the synthetic one (tests/search/synthetic.py, with its expert terms): it
isolates the search engine; solver.search.rules and solver/data/frameworks/*.json carry the
rules, each cited to the framework's source.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.errors import InfeasibleError
from solver.frameworks import load_framework
from solver.frameworks.capability import violations
from solver.frameworks.profile import FrameworkName
from solver.model_parts import MoESpec
from solver.search import rules
from solver.search.api import search_layouts
from solver.search.fallback import usable_gpu_counts
from solver.search.options import SearchOptions
from solver.search.space import enumerate_layouts
from solver.search.ties import rank_with_ties
from solver.specs import ModelSpec, TrainingSpec
from tests.search import synthetic
from topology.spec import ClusterSpec

SMALL = {"max_micro_batch": 2, "max_vpp": 2, "max_cp": 2, "time_limit_s": 30}


def moe_model(layers: int = 4, experts: int = 8, ffn: int = 512) -> ModelSpec:
    return ModelSpec(name="tiny-moe", layers=layers, hidden=256, ffn_hidden=1024, ffn_gated=True, heads=4,
                     kv_heads=2, head_dim=64, vocab=1000, tied_embeddings=True,
                     moe=MoESpec(experts=experts, experts_per_token=2, expert_ffn_hidden=ffn))


def cluster(nodes: int = 2, memory_gb: float = 80) -> ClusterSpec:
    return ClusterSpec.model_validate({
        "name": "c", "nodes": nodes, "gpus_per_node": synthetic.GPUS_PER_NODE,
        "gpu": {"name": "g", "memory_gb": memory_gb, "peak_tflops": 100, "hbm_gb_s": 1000},
        "intra_node": {"bandwidth_gb_s": 100, "latency_us": 1},
        "inter_node": {"bandwidth_gb_s": 10, "latency_us": 5}})


def training(framework: FrameworkName = "megatron-core", batch_seqs: int = 16) -> TrainingSpec:
    return TrainingSpec(seq_len=1024, global_batch_tokens=1024 * batch_seqs, tokens=1e9, framework=framework)


def broken(train: TrainingSpec, model: ModelSpec, lo) -> set[str]:
    fw = load_framework(train.framework)
    accum = rules.accumulation(train, lo.dp, lo.micro_batch)
    return {v.rule for v in violations(fw, kernel=train.attention_kernel, tp=lo.tp, pp=lo.pp, cp=lo.cp, vpp=lo.vpp,
                                       sp=lo.sequence_parallel, zero=lo.zero_stage, accum=accum,
                                       moe=model.moe is not None, dp=lo.dp, ep=lo.ep, etp=lo.etp)}


def oracle(model, clu, train, options, cap):
    ev = synthetic.evaluator(model, clu, train, options, cap)
    layouts = list(enumerate_layouts(model, clu, train, options))
    if not layouts and not options.gpus_may_vary:  # as the search: the largest usable counts
        layouts = [lo for g in usable_gpu_counts(model, clu, train, options)
                   for lo in enumerate_layouts(model, clu, train, options.model_copy(update={"gpus": g}))]
    found = [e for e in map(ev, layouts) if e]
    return rank_with_ties(found, options.objective)[0]


def cpsat(model, clu, train, options, cap):
    try:
        return search_layouts(model, clu, train, options, rows_builder=synthetic.rows_builder(cap),
                              evaluator=synthetic.evaluator(model, clu, train, options, cap),
                              explain=False).layouts
    except InfeasibleError:
        return []


def test_space_folds_ep_and_etp_onto_the_stage_ranks():
    model, clu = moe_model(), cluster()
    space = list(enumerate_layouts(model, clu, training(), SearchOptions(**SMALL)))
    eps = {lo.ep for lo in space}
    assert eps == {1, 2, 4, 8}  # the divisors of 8 experts that fit 8 GPUs
    assert {lo.etp for lo in space} == {1, 2, 4}  # divisors of the 4-GPU node that split 512
    for lo in space:
        assert lo.etp is not None and (lo.tp * lo.cp * lo.dp) % (lo.ep * lo.etp) == 0
        assert lo.expert_dp == lo.tp * lo.cp * lo.dp // (lo.ep * lo.etp)
    assert any(lo.etp != lo.tp for lo in space)  # Megatron: ETP independent of TP


def test_dense_model_keeps_ep_1_and_no_etp():
    dense = moe_model().model_copy(update={"moe": None})
    space = list(enumerate_layouts(dense, cluster(), training(), SearchOptions(**SMALL)))
    assert space and all(lo.ep == 1 and lo.etp is None for lo in space)


def test_etp_must_split_the_expert_width():
    space = enumerate_layouts(moe_model(ffn=6), cluster(), training(), SearchOptions(**SMALL))
    assert {lo.etp for lo in space} == {1, 2}  # 4 does not divide 6


def test_max_ep_caps_the_expert_degree():
    space = enumerate_layouts(moe_model(), cluster(), training(), SearchOptions(max_ep=2, **SMALL))
    assert {lo.ep for lo in space} == {1, 2}


# (framework, rule): one per expert rule each framework imposes beyond the structural space.
CASES = [
    ("megatron-core", "moe_tp_needs_sp"),         # moe_layer.py: MoE with TP needs SP in training
    ("torchtitan", "expert_tensor_parallel"),     # experts not TP-sharded with EP, TP-sharded without
    ("torchtitan", "expert_ranks"),               # EP inside dp_shard x cp x tp: not over DDP replicas
    ("deepspeed", "expert_tensor_parallel"),      # expert TP is the model-parallel group
    ("deepspeed", "expert_ranks"),                # the EP group is carved out of DP
    ("deepspeed", "moe_zero_stages"),             # native MoE refuses ZeRO-3
]


@pytest.fixture
def without_expert_rules(monkeypatch):
    def permissive():
        for name in ("framework_expert_ok", "framework_expert_shard_ok"):
            monkeypatch.setattr(rules, name, lambda *a, **k: True)
    return permissive


@pytest.mark.parametrize("framework, rule", CASES, ids=[f"{f}-{r}" for f, r in CASES])
def test_expert_rule_excludes_layouts(framework, rule, without_expert_rules):
    model, clu, train = moe_model(), cluster(), training(framework)
    options = SearchOptions(top_k=5, **SMALL)
    space = list(enumerate_layouts(model, clu, train, options))
    assert space and not any(broken(train, model, lo) for lo in space)
    got = cpsat(model, clu, train, options, 80e9)
    assert got and not any(broken(train, model, r.layout) for r in got)
    assert [r.objective_units for r in got] == pytest.approx(
        [e.objective_units for e in oracle(model, clu, train, options, 80e9)][:5], rel=1e-12)
    without_expert_rules()
    raw = list(enumerate_layouts(model, clu, train, options))
    assert any(rule in broken(train, model, lo) for lo in raw), f"no layout breaks {rule}: the test is vacuous"


def test_megatron_runs_expert_tp_apart_from_tp_and_ep_across_cp():
    """Megatron: any ETP with EP x ETP | TP x CP x DP, EP with PP and with CP (parallel_state.py)."""
    space = list(enumerate_layouts(moe_model(), cluster(), training(), SearchOptions(**SMALL)))
    assert any(lo.ep > 1 and lo.etp != lo.tp for lo in space)
    assert any(lo.ep > 1 and lo.cp > 1 for lo in space) and any(lo.ep > 1 and lo.pp > 1 for lo in space)


def test_torchtitan_keeps_ddp_replicas_outside_ep():
    space = list(enumerate_layouts(moe_model(), cluster(), training("torchtitan"), SearchOptions(**SMALL)))
    ddp = [lo for lo in space if lo.zero_stage == 0 and lo.ep > 1]
    assert ddp and all((lo.tp * lo.cp) % lo.ep == 0 for lo in ddp)
    assert any(lo.zero_stage > 0 and lo.ep > lo.tp * lo.cp for lo in space)  # FSDP ranks hold EP


def test_no_ep_where_the_framework_has_none(monkeypatch):
    """A framework that cannot run EP never gets an EP layout (the expert_parallel fact)."""
    fw = load_framework("deepspeed")
    ex = fw.capabilities.experts
    off = fw.model_copy(update={"capabilities": fw.capabilities.model_copy(update={
        "experts": ex.model_copy(update={"expert_parallel": ex.expert_parallel.model_copy(update={"value": False})})})})
    monkeypatch.setattr(rules, "load_framework", lambda name: off)
    model, clu, train = moe_model(), cluster(), training("deepspeed")
    options = SearchOptions(top_k=3, **SMALL)
    assert {lo.ep for lo in enumerate_layouts(model, clu, train, options)} == {1}
    assert all(r.layout.ep == 1 for r in cpsat(model, clu, train, options, 80e9))


problems = st.tuples(st.integers(1, 6), st.sampled_from([2, 4, 8]), st.integers(1, 2),
                     st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from(["megatron-core", "torchtitan", "deepspeed"]))


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.sampled_from(["step_time", "min_cost", "min_gpus"]), st.floats(5e7, 2e9), st.sampled_from([1, 3]))
def test_cpsat_equals_oracle_on_random_moe_problems(problem, objective, cap, k):
    layers, experts, nodes, batch, framework = problem
    model, clu, train = moe_model(layers, experts), cluster(nodes), training(framework, batch)
    options = SearchOptions(top_k=k, objective=objective, **SMALL)
    expected = [e.objective_units for e in oracle(model, clu, train, options, cap)][:k]
    got = cpsat(model, clu, train, options, cap)
    assert [r.objective_units for r in got] == pytest.approx(expected, rel=1e-12)
    assert all(not broken(train, model, r.layout) for r in got)


def test_a2a_overlap_layouts_are_ones_megatron_accepts():
    """training.moe_a2a_overlap (--overlap-moe-expert-parallel-comm) needs EP > 1, VPP > 1 when
    PP > 1 and no full recompute (Megatron-LM d98e8a64 transformer_config.py L3002-3023): neither
    the oracle's space nor CP-SAT's answer holds a layout that breaks it, and without the overlap
    such layouts exist (the rule is not vacuous)."""
    model, clu = moe_model(), cluster()
    options = SearchOptions(top_k=5, **SMALL)
    plain = training()
    over = plain.model_copy(update={"moe_a2a_overlap": True})

    def bad(lo):
        return lo.ep == 1 or (lo.pp > 1 and lo.vpp == 1) or lo.recompute == "full"

    assert any(bad(lo) for lo in enumerate_layouts(model, clu, plain, options))
    assert not any(bad(lo) for lo in enumerate_layouts(model, clu, over, options))
    got = cpsat(model, clu, over, options, 80e9)
    assert got and not any(bad(r.layout) for r in got)
    assert [r.objective_units for r in got] == pytest.approx(
        [e.objective_units for e in oracle(model, clu, over, options, 80e9)][:5], rel=1e-12)


def test_moe_pipelines_split_the_layers_evenly():
    """A MoE layout's pp x vpp divides the layers: an uneven split needs explicit pipeline_layers
    (Megatron arguments.py validate_args), which MoE models cannot carry yet."""
    model = moe_model(6)
    space = list(enumerate_layouts(model, cluster(), training(), SearchOptions(**SMALL)))
    assert any(lo.pp > 1 for lo in space)
    assert all(model.layers % (lo.pp * lo.vpp) == 0 for lo in space)
