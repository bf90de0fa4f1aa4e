"""torchtitan's pipeline (PyTorch's PipelineStage) keeps a receive buffer per micro-batch of the
step for the stage input and for its output's gradient, and each forward's output until its
backward (profile memory.stage_recv_buffers; pytorch/pytorch 0138610 pipelining/stage.py).
Hand counts; each fails on the code before it (no such term)."""
import pytest

from solver.cost.memory import activation_bytes, embedding_stored_bytes, layer_activation_bytes, stage_buffer_bytes
from solver.cost.options import CostOptions
from solver.cost.terms import CostContext
from solver.presets import load_model
from solver.specs import TrainingSpec
from topology.catalog import load_cluster

S = 8192
A = 2 * S * 4096  # one boundary tensor of Llama 3 8B, micro-batch 1, BF16: 67,108,864 bytes


def ctx(framework):
    training = TrainingSpec(seq_len=S, global_batch_tokens=S * 64, framework=framework)
    return CostContext(load_model("llama3-8b"), load_cluster("seed-512"), training, CostOptions())


def test_stage_buffers_by_rank():
    # PP 4, m = 8 micro-batches, 1F1B: rank r has f = min(4 - r, 8) in flight.
    # rank 0: outputs 4 A + gradient buffers 8 A = 12 A = 805,306,368
    # rank 1: outputs 3 A + gradients 8 A + inputs (8 - 3) A = 16 A = 1,073,741,824
    # rank 3 (last): inputs (8 - 1) A = 7 A = 469,762,048
    c = ctx("torchtitan")
    kw = {"tp": 1, "cp": 1, "sp": False, "micro_batch": 1, "pp": 4, "vpp": 1, "grad_accum": 8}
    assert [stage_buffer_bytes(c, rank=r, **kw) for r in range(4)] == [805_306_368, 1_073_741_824,
                                                                       1_073_741_824, 469_762_048]
    # TP 4 with sequence parallelism: the boundary tensor is sequence-sharded, A / 4.
    assert stage_buffer_bytes(c, rank=0, **{**kw, "tp": 4, "sp": True}) == 805_306_368 / 4
    # Interleaved, v = 2: at most 2 v m A = 32 A = 2,147,483,648 on any rank.
    assert stage_buffer_bytes(c, rank=0, **{**kw, "vpp": 2}) == 2_147_483_648
    # No pipeline, or another framework: none.
    assert stage_buffer_bytes(c, rank=0, **{**kw, "pp": 1}) == 0.0
    assert stage_buffer_bytes(ctx("megatron-core"), rank=0, **kw) == 0.0


def test_first_rank_activations_carry_its_stage_buffers():
    # 32 layers / PP 4 = 8 on rank 0, 4 micro-batches in flight of 8: layers + embedding + 12 A.
    c = ctx("torchtitan")
    per_layer = layer_activation_bytes(c, tp=1, cp=1, sp=False, recompute="none", micro_batch=1)
    embed = embedding_stored_bytes(c, tp=1, cp=1, sp=False, micro_batch=1)
    got = activation_bytes(c, tp=1, cp=1, sp=False, recompute="none", micro_batch=1, pp=4, vpp=1, grad_accum=8)
    assert got == pytest.approx(8 * 4 * per_layer + 4 * embed + 12 * A)
    # With full recompute (one 2 s b h input per layer) and m = 64, rank 1's 2 m A = 128 A
    # outweighs rank 0's (64 + 4) A: rank 1 is charged, 8 layers x 3 in flight + 128 A, plus the
    # one layer recomputed in full.
    full = layer_activation_bytes(c, tp=1, cp=1, sp=False, recompute="full", micro_batch=1)
    whole = layer_activation_bytes(c, tp=1, cp=1, sp=False, recompute="none", micro_batch=1)
    got = activation_bytes(c, tp=1, cp=1, sp=False, recompute="full", micro_batch=1, pp=4, vpp=1, grad_accum=64)
    rank0 = 8 * 4 * full + 4 * embed + 68 * A
    rank1 = 8 * 3 * full + 128 * A
    assert rank1 > rank0
    assert got == pytest.approx(rank1 + whole)


def test_moe_split_ranks_carry_their_stage_buffers():
    """A MoE model on an explicit (first/last) split is costed rank by rank (moe_stages), and
    torchtitan's MoE splits are exported (solver.search.moe_split.FIRST_LAST_FRAMEWORKS): each
    rank's activations carry its stage's buffers as on even stages. Qwen3-30B-A3B (hidden 2048,
    all 48 layers MoE), seq 4096, micro-batch 1, TP 1: A = 2 x 4096 x 2048 = 16,777,216 bytes.
    PP 4, m = 8, 1F1B: rank 0 12 A = 201,326,592; ranks 1-2 16 A = 268,435,456; last 7 A =
    117,440,512. Fails on the code before it (the split path charged none)."""
    from pathlib import Path

    from solver.cost.moe_stages import activation_parts, rank_activation_bytes
    from solver.specs import LayoutSpec

    hf = Path(__file__).resolve().parents[1] / "fixtures" / "hf" / "qwen3-30b-a3b" / "config.json"
    training = TrainingSpec(seq_len=4096, global_batch_tokens=4096 * 64, framework="torchtitan")
    c = CostContext(load_model(str(hf)), load_cluster("seed-512"), training, CostOptions())
    lo = LayoutSpec(tp=1, pp=4, dp=8, ep=8, etp=1, zero_stage=1, micro_batch=1, recompute="none",
                    pipeline_layers=[11, 13, 13, 11])
    ns, ks = [11, 13, 13, 11], [11, 13, 13, 11]
    per_layer, per_moe, embed, _full, _moe_full, dispatch, _mtp, flight = activation_parts(c, lo, 8)[:8]
    layers = [f * (n * per_layer + k * per_moe) for f, n, k in zip(flight, ns, ks, strict=True)]
    layers[0] += flight[0] * embed
    expected = [x + dispatch + b for x, b in zip(layers, [201_326_592, 268_435_456, 268_435_456, 117_440_512],
                                                  strict=True)]
    assert rank_activation_bytes(c, lo, 8, ns, ks) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("framework", "buffers"), [
    # torchtitan, 1F1B PP 4, m = 8 (test_stage_buffers_by_rank): 12 A, 16 A, 16 A, 7 A
    ("torchtitan", [805_306_368, 1_073_741_824, 1_073_741_824, 469_762_048]),
    # DeepSpeed, TP 1 (memory.pipe_buffer_bytes): per micro-batch in flight its output on every
    # rank but the last and its received input on every rank but the first, A + 0, A + A, A + A,
    # 0 + A, times f = 4, 3, 2, 1 in flight: 4 A, 6 A, 4 A, 1 A
    ("deepspeed", [268_435_456, 402_653_184, 268_435_456, 67_108_864]),
])
def test_dense_split_ranks_carry_the_pipelines_buffers(framework, buffers):
    """A dense explicit split whose first and last ranks differ from the middle ones (Llama 3 8B,
    32 layers as [7, 9, 9, 7]) is costed rank by rank (step_memory.stage_profile) with the
    pipeline buffers MoE splits read (moe_stages.rank_buffers). Per rank: f x n x per-layer
    bytes, the embedding's stored values on rank 0, the buffers. Parameters by hand (Llama 3 8B:
    hidden 4096, 8 KV heads of 128, FFN 14336, vocabulary 128256): a layer 2 x 4096^2 (Q, O) +
    2 x 4096 x 1024 (K, V) + 3 x 4096 x 14336 (SwiGLU) + 2 x 4096 (norms) = 218,112,000; the
    embedding and the LM head 128256 x 4096 = 525,336,576 each, the final norm 4096."""
    from solver.cost.step_memory import stage_profile

    c = ctx(framework)
    per_layer = layer_activation_bytes(c, tp=1, cp=1, sp=False, recompute="none", micro_batch=1)
    embed = embedding_stored_bytes(c, tp=1, cp=1, sp=False, micro_batch=1)
    got = stage_profile(c, tp=1, cp=1, sp=False, recompute="none", micro_batch=1, pp=4, vpp=1, grad_accum=8,
                        split=(7, 9, 9, 7))
    layer, vocab = 218_112_000, 525_336_576
    assert [p for p, _, _ in got] == [7 * layer + vocab, 9 * layer, 9 * layer, 7 * layer + 4096 + vocab]
    assert [last for _, _, last in got] == [False, False, False, True]
    expected = [f * n * per_layer + b for f, n, b in zip((4, 3, 2, 1), (7, 9, 9, 7), buffers, strict=True)]
    expected[0] += 4 * embed
    assert [a for _, a, _ in got] == pytest.approx(expected, rel=1e-12)
