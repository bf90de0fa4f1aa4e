"""Small random problems (model, cluster, training) for the search tests."""
from __future__ import annotations

from hypothesis import strategies as st

from solver.specs import ModelSpec, TrainingSpec
from topology.spec import ClusterSpec


def tiny_model(layers: int, heads: int, kv_div: int, head_dim: int, ffn_mult: int, gated: bool) -> ModelSpec:
    kv = max(1, heads // kv_div)
    return ModelSpec(name="tiny", layers=layers, hidden=heads * head_dim, ffn_hidden=ffn_mult * heads * head_dim,
                     ffn_gated=gated, heads=heads, kv_heads=kv, head_dim=head_dim, vocab=4096,
                     tied_embeddings=True)


def tiny_cluster(nodes: int, gpus_per_node: int, memory_gb: float) -> ClusterSpec:
    return ClusterSpec.model_validate({
        "name": "tiny", "nodes": nodes, "gpus_per_node": gpus_per_node,
        "gpu": {"name": "g", "memory_gb": memory_gb, "peak_tflops": 300, "hbm_gb_s": 2000},
        "intra_node": {"bandwidth_gb_s": 200, "latency_us": 3},
        "inter_node": {"bandwidth_gb_s": 25, "latency_us": 10}})


def tiny_training(seq_len: int, batch_seqs: int, tokens: float = 1e10) -> TrainingSpec:
    return TrainingSpec(seq_len=seq_len, global_batch_tokens=seq_len * batch_seqs, tokens=tokens)


models = st.builds(tiny_model, layers=st.integers(1, 8), heads=st.sampled_from([1, 2, 4, 8]),
                   kv_div=st.sampled_from([1, 2, 4]), head_dim=st.sampled_from([32, 64, 128]),
                   ffn_mult=st.integers(2, 4), gated=st.booleans())
# GPU memory: the cost model's fixed overhead (3 GB framework, 10% margin) plus a random
# share of the model's unsharded state, so the memory limit binds in many examples.
headroom = st.floats(0.1, 2.5)


def binding_cluster(model: ModelSpec, nodes: int, gpus_per_node: int, share: float) -> ClusterSpec:
    from solver.cost.accounting import parameter_counts
    from solver.frameworks import load_framework

    # `share` of the unsharded model state under the default framework's recipe (Megatron-Core
    # ZeRO-0: 18 bytes/param), the per-layout memory the cost model charges.
    recipe = load_framework("megatron-core").recipe(0, 1)
    assert recipe is not None  # Megatron-Core runs ZeRO-0 at PP 1
    full = recipe.bytes_per_param(1)
    state = parameter_counts(model).total * full
    return tiny_cluster(nodes, gpus_per_node, (3e9 + share * state) / 0.9 / 1e9)


shapes = st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4, 8]), headroom)
trainings = st.builds(tiny_training, seq_len=st.sampled_from([256, 512, 1024, 2048]),
                      batch_seqs=st.sampled_from([1, 2, 4, 6, 8, 16, 32]))
