"""solver.cost.shared_times: GPU times shared across problems are the functions' own values,
reused only by problems whose model, sequence, kernel, GPU, options and FP8 work are equal."""
from __future__ import annotations

from solver.cost import compute as C
from solver.cost import terms as T
from solver.cost.estimate import make_context
from solver.cost.shared_times import GPU_TIMES, SharedGpuTimes
from solver.presets import load_model, load_training
from topology.catalog import load_cluster

MODEL, CLUSTER, TRAINING = load_model("seed-70b"), load_cluster("seed-512"), load_training("seed-300b")


def _ctx(nodes: int = 64, seq_len: int = 8192, bw: float = 45.0):
    cluster = CLUSTER.model_copy(update={"nodes": nodes, "name": f"c{nodes}",
                                         "inter_node": CLUSTER.inter_node.model_copy(
                                             update={"bandwidth_gb_s": bw})})
    training = TRAINING.model_copy(update={"seq_len": seq_len})
    return make_context(MODEL, cluster, training)


def test_values_equal_the_compute_functions_and_are_shared_by_cluster_size_and_network():
    GPU_TIMES.cache_clear()
    a, b, c = _ctx(), _ctx(nodes=32, bw=90.0), _ctx(seq_len=4096)
    direct = C.layer_times(MODEL, 8192, TRAINING.attention_kernel, CLUSTER.gpu, a.options, 4, 1, True, 2,
                           a.fp8_work)
    assert T._layer(a, 4, 1, True, 2) == direct
    head = C.head_times_s(MODEL, 8192, CLUSTER.gpu, a.options, 4, 1, True, 2)
    assert T.head_extra_s(a, tp=1, cp=1, sp=False, micro_batch=2, pp=2) == C.head_times_s(
        MODEL, 8192, CLUSTER.gpu, a.options, 1, 1, False, 2)
    hits, misses = GPU_TIMES.hits, GPU_TIMES.misses
    assert T._layer(b, 4, 1, True, 2) == direct  # another cluster size and network: shared
    assert GPU_TIMES.hits == hits + 1
    assert T._layer(c, 4, 1, True, 2) != direct  # another sequence length: its own value
    assert GPU_TIMES.misses == misses + 1
    from solver.cost.shared_times import head_times_s
    assert head_times_s(b, 4, 1, True, 2) == head


def test_bounded_and_cleared():
    shared = SharedGpuTimes(max_entries=2)
    ctx = _ctx()
    values = [shared.get(ctx, (i,), lambda i=i: i * 10) for i in range(3)]
    assert values == [0, 10, 20] and shared.cache_info()[3] == 1  # emptied when full, then 20 stored
    shared.cache_clear()
    assert shared.cache_info()[3] == 0


def test_moe_block_times_are_shared_by_value_and_keyed_on_the_load_imbalance():
    from solver.cost import moe_comm as MC
    from solver.cost import moe_layer as ML

    model = load_model("tests/fixtures/hf/mixtral-8x22b/config.json")
    cluster = load_cluster("dgx-h100-superpod")
    training = TRAINING.model_copy(update={"seq_len": 4096})
    a = make_context(model, cluster.model_copy(update={"nodes": 64}), training)
    b = make_context(model, cluster.model_copy(update={"nodes": 32}), training)
    c = make_context(model, cluster, training.model_copy(update={"moe_load_imbalance": 1.5}))
    kw = {"tp": 2, "cp": 1, "micro_batch": 1, "ep": 8, "etp": 1}
    GPU_TIMES.cache_clear()
    direct = ML.moe_block_times(model, 4096, MC.imbalance(a), cluster.gpu, a.options, **kw, fp8=a.fp8_work)
    assert MC.block_times(a, **kw) == direct
    hits = GPU_TIMES.hits
    assert MC.block_times(b, **kw) == direct and GPU_TIMES.hits == hits + 1  # another cluster size: shared
    assert MC.block_times(c, **kw) == ML.moe_block_times(model, 4096, 1.5, cluster.gpu, c.options, **kw,
                                                         fp8=c.fp8_work) != direct  # its own imbalance
    assert MC._dense_ffn(b, 2, 1, 1) == ML.dense_ffn_times(model, 4096, cluster.gpu, b.options, tp=2, cp=1,
                                                            micro_batch=1, fp8=b.fp8_work)


def test_moe_compute_parts_are_shared_by_value_and_keyed_on_the_selective_set():
    """moe_comm._compute_parts is shared by problems whose block inputs and selective recompute
    set are equal, and not by one whose set differs ('mlp' adds the dense FFN forward it
    redoes, which the shared value of another set would lack)."""
    from solver.cost import moe_comm as MC

    model = load_model("tests/fixtures/hf/deepseek-v3/config.json")
    cluster = load_cluster("h800-2048")
    training = TRAINING.model_copy(update={"seq_len": 4096})
    a = make_context(model, cluster, training)
    b = make_context(model, cluster.model_copy(update={"nodes": 128}), training)
    mlp = make_context(model, cluster, training.model_copy(update={"recompute_modules": ("moe_act", "mlp")}))
    GPU_TIMES.cache_clear()
    key = (2, 1, 1, 8, 1)  # tp, cp, micro_batch, ep, etp
    parts = MC._compute_parts(a, *key)
    assert parts[4] == 0.0  # no mlp in a's set: nothing of the dense FFN redone
    memo = MC.block_calc(a).memo
    assert MC._compute_parts(b, *key) == parts and MC.block_calc(b).memo is memo and len(memo) == 1
    other = MC._compute_parts(mlp, *key)
    assert len(memo) == 2 and other[:3] == parts[:3]
    assert other[4] == MC._dense_ffn(mlp, 2, 1, 1)[0] > 0.0  # mlp redoes the dense FFN's forward
