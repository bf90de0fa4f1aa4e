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
