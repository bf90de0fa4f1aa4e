"""The CP-SAT engine (window, ranking, objectives) against brute force on a synthetic cost."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.errors import InfeasibleError
from solver.search.api import search_layouts
from solver.search.fallback import usable_gpu_counts
from solver.search.options import SearchOptions
from solver.search.space import enumerate_layouts
from solver.search.ties import rank_with_ties
from solver.specs import ModelSpec, TrainingSpec
from topology.spec import ClusterSpec
from tests.search import synthetic


def small_problem(layers, heads_pow, nodes, gpn, seq_pow, batch_seqs, tokens=1e9):
    heads = 2 ** heads_pow
    model = ModelSpec(layers=layers, hidden=64 * heads, ffn_hidden=256 * heads, ffn_gated=True,
                      heads=heads, kv_heads=max(1, heads // 2), head_dim=64, vocab=1000,
                      tied_embeddings=True)
    cluster = ClusterSpec(name="c", nodes=nodes, gpus_per_node=gpn,
                          gpu={"name": "g", "memory_gb": 80, "peak_tflops": 100, "hbm_gb_s": 1000},
                          intra_node={"bandwidth_gb_s": 100, "latency_us": 1},
                          inter_node={"bandwidth_gb_s": 10, "latency_us": 5})
    seq = 2 ** seq_pow
    training = TrainingSpec(seq_len=seq, global_batch_tokens=seq * batch_seqs, tokens=tokens)
    return model, cluster, training


def brute(model, cluster, training, options, cap):
    """Every layout's objective, ranked with the tie rule (solver.search.ties: the layouts
    within the resolution of the best first, simplest first); when no layout uses all GPUs
    (and the count is fixed), those of the largest usable counts (solver.search.fallback)."""
    return [e.objective_units for e in rank_with_ties(_brute(model, cluster, training, options, cap),
                                                      options.objective)[0]]


def _brute(model, cluster, training, options, cap):
    layouts = list(enumerate_layouts(model, cluster, training, options))
    if not layouts and not options.gpus_may_vary:
        counts = usable_gpu_counts(model, cluster, training, options)
        return [e for g in counts for e in _brute(model, cluster, training,
                                                  options.model_copy(update={"gpus": g}), cap)]
    ev = synthetic.evaluator(model, cluster, training, options, cap)
    return [e for e in map(ev, layouts) if e]


def run(model, cluster, training, options, cap):
    return search_layouts(model, cluster, training, options,
                          rows_builder=synthetic.rows_builder(cap),
                          evaluator=synthetic.evaluator(model, cluster, training, options, cap),
                          explain=False)


problems = st.tuples(st.integers(1, 12), st.integers(0, 3), st.integers(1, 4), st.sampled_from([1, 2, 4, 8]),
                     st.integers(6, 10), st.sampled_from([1, 2, 4, 6, 8, 16, 32]))


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(problems, st.sampled_from(["step_time", "min_cost", "min_gpus"]), st.floats(2e7, 4e8),
       st.booleans(), st.sampled_from([1, 3, 10]))
def test_engine_matches_brute_force(p, objective, cap, fewer, k):
    model, cluster, training = small_problem(*p)
    options = SearchOptions(top_k=k, objective=objective, allow_fewer_gpus=fewer, max_micro_batch=4,
                            max_vpp=3, max_cp=4, time_limit_s=30)
    expected = brute(model, cluster, training, options, cap)
    try:
        got = run(model, cluster, training, options, cap)
    except InfeasibleError:
        assert expected == []
        return
    assert got.status == "OPTIMAL"
    assert [r.objective_units for r in got.layouts] == expected[:k]
