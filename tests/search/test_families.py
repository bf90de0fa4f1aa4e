"""One test per constraint family: feasible and infeasible cases, at the rule level and in
the CP-SAT model (an infeasible core names the family; layouts found obey it)."""
from solver.search import rules
from solver.search.explain import structural_core
from solver.search.options import SearchOptions
from solver.search.space import enumerate_layouts
from tests.search.problems import tiny_cluster, tiny_model, tiny_training

OPT = SearchOptions()


def model(layers=4, heads=8, kv_div=1):
    return tiny_model(layers, heads, kv_div, 64, 4, True)


def test_tensor_family():
    m8, c4 = model(heads=8, kv_div=4), tiny_cluster(2, 4, 80)  # 8 heads, 2 kv heads, 4 GPUs/node
    assert rules.tensor_ok(m8, c4, OPT, 4)          # divides heads; multiple of kv heads
    assert not rules.tensor_ok(model(heads=6), c4, OPT, 4)       # 4 does not divide 6 heads
    assert not rules.tensor_ok(m8, c4, OPT, 8)                   # 8 > 4 GPUs per node
    assert rules.tensor_ok(m8, c4, SearchOptions(allow_tp_outside_node=True), 8)
    m12 = tiny_model(1, 12, 3, 64, 4, True)                    # 12 heads, 4 kv heads
    assert not rules.tensor_ok(m12, tiny_cluster(1, 8, 80), OPT, 6)  # 6 > 4 and not a multiple
    assert rules.sequence_parallel_ok(2, True) and not rules.sequence_parallel_ok(1, True)
    # Both GPUs must be TP ranks (1 layer, 1 sequence, no CP split) and 3 heads do not split.
    odd = tiny_model(1, 3, 1, 64, 4, True)
    assert "tensor" in structural_core(odd, tiny_cluster(1, 2, 80), tiny_training(6, 1), OPT)
    assert structural_core(odd, tiny_cluster(1, 3, 80), tiny_training(6, 1), OPT) is None


def test_pipeline_family():
    m = model(layers=6)
    assert rules.pipeline_ok(m, OPT, 3, 2) and rules.pipeline_ok(m, OPT, 4, 1)   # 6 = 3 x 2; uneven 4
    assert not rules.pipeline_ok(m, SearchOptions(allow_uneven_pipeline=False), 4, 1)
    assert not rules.pipeline_ok(m, OPT, 4, 2) and not rules.pipeline_ok(m, OPT, 1, 2)
    assert not rules.pipeline_ok(m, OPT, 7, 1)                                  # > layers
    assert rules.interleave_batch_ok(4, 2, 8) and not rules.interleave_batch_ok(4, 2, 6)
    # 4 GPUs, 1 sequence per step, 1 head: only PP can use them, and 2 layers cannot fill 4 stages.
    one_head = tiny_model(2, 1, 1, 64, 4, True)
    assert "pipeline" in structural_core(one_head, tiny_cluster(1, 4, 80), tiny_training(6, 1), OPT)
    assert structural_core(tiny_model(4, 1, 1, 64, 4, True), tiny_cluster(1, 4, 80),
                           tiny_training(6, 1), OPT) is None


def test_context_family():
    t = tiny_training(1024, 4)
    assert rules.context_ok(t, 4) and not rules.context_ok(tiny_training(1000, 4), 16)
    one_head = tiny_model(1, 1, 1, 64, 4, True)   # 1 layer, 1 head: 2 GPUs must be CP ranks
    assert "context" in structural_core(one_head, tiny_cluster(1, 2, 80), tiny_training(6, 1), OPT)
    assert structural_core(one_head, tiny_cluster(1, 2, 80), tiny_training(8, 1), OPT) is None


def test_gpus_family():
    c = tiny_cluster(2, 4, 80)
    assert rules.gpus_ok(c, OPT, 8) and not rules.gpus_ok(c, OPT, 4)
    assert rules.gpus_ok(c, SearchOptions(allow_fewer_gpus=True), 4)
    assert not rules.gpus_ok(c, SearchOptions(allow_fewer_gpus=True), 16)
    for lo in enumerate_layouts(model(), c, tiny_training(512, 8), OPT):
        assert lo.gpus == 8
    assert all(lo.gpus <= 8 for lo in enumerate_layouts(model(), c, tiny_training(512, 8),
                                                         SearchOptions(allow_fewer_gpus=True)))


def test_batch_family():
    t = tiny_training(512, 6)   # 6 sequences per step
    assert rules.batch_ok(t, OPT, 3, 2) and rules.batch_ok(t, OPT, 6, 1)
    assert not rules.batch_ok(t, OPT, 4, 1)                                     # 8 != 6 sequences
    assert rules.batch_ok(t, SearchOptions(batch_tolerance=0.34), 4, 1)      # 8 within 34% of 6
    # 1 sequence per step on 2 GPUs of a 1-head, 1-layer model: only CP could help, and the
    # sequence is not divisible; widening the batch would.
    one = tiny_model(1, 1, 1, 64, 4, True)
    core = structural_core(one, tiny_cluster(1, 2, 80), tiny_training(6, 1), OPT)
    assert "batch" in core or "context" in core
    assert structural_core(one, tiny_cluster(1, 2, 80), tiny_training(6, 2), OPT) is None


def test_pipeline_split_matches_the_cost_models_busiest_rank():
    from solver.cost.terms import layers_on_rank

    for layers in range(1, 130, 7):
        for pp in range(1, min(layers, 40) + 1):
            split = rules.pipeline_split(layers, pp, 1)
            assert sum(split) == layers and min(split) >= 1 and len(split) == pp
            assert max(split) == layers_on_rank(layers, pp, 1)
            if pp > 2:   # the embedding and LM-head stages never carry more than a middle one
                assert split[0] <= max(split[1:-1]) and split[-1] <= max(split[1:-1])
    assert rules.pipeline_split(126, 16, 1) == (7,) + (8,) * 14 + (7,)   # Llama 3 405B on pp 16
    assert rules.pipeline_split(80, 4, 5) == (20, 20, 20, 20)
