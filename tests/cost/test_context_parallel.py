"""Context parallelism is not free: the ring K/V exchange per attention step, and the
DP x CP gradient group's own bandwidth.

Ring attention with causal load balancing (Liu et al. 2023, "Ring Attention with Blockwise
Transformers", arXiv:2310.01889; Megatron-LM context parallelism over Transformer Engine's
AttnFuncWithCPAndKVP2P, NVIDIA/TransformerEngine d0067d0, transformer_engine/pytorch/attention/
dot_product_attention/context_parallel.py): the sequence is cut into 2 x cp chunks, rank r holds
chunks r and 2cp-1-r, so each of the cp ring steps computes the same two chunk-by-chunk tiles
(1/cp of the rank's causal attention). Forward: cp - 1 K/V sends, each under one step's compute.
Backward: step 0 sends K/V, steps 1..cp-2 send K/V and the travelling dK/dV (one buffer of twice
the size), step cp-1 sends dK/dV; each under one step's backward compute.

Seed cluster (solver/data/clusters/seed-512.json): 1000 TFLOPs peak, 45 GB/s and 10 us between
nodes; attention runs at 0.35 of peak (solver.cost.options). Seed 70B: 64 query heads, 8 KV
heads, head_dim 128.
"""
import pytest

from solver.cost import terms as T
from solver.cost.estimate import make_context
from solver.presets import load_model
from solver.specs import TrainingSpec
from topology.catalog import load_cluster


@pytest.fixture(scope="module")
def ctx():
    return make_context(load_model("seed-70b"), load_cluster("seed-512"),
                        TrainingSpec(seq_len=8192, global_batch_tokens=8192 * 512))


def test_ring_steps_hidden_when_each_step_computes_longer_than_its_send(ctx):
    # TP8 CP2, micro-batch 1: 4096 local tokens, 1 KV head per TP rank x 128 = 128 wide.
    # K+V block: 2 x 2 bytes x 4096 x 128 = 2,097,152 B -> 10 us + 2,097,152 / 45e9 = 56.6 us.
    # Attention forward on the rank: 0.5 x 4 x 4096 x 8192 x 8 heads x 128 / 3.5e14 = 196.3 us,
    # 98.2 us per step (> 56.6): hidden; backward 2.5 x 98.2 = 245.4 us per step (> 56.6): hidden.
    assert T.layer_cp_comm_s(ctx, tp=8, cp=2, recompute="none", micro_batch=1) == 0.0


def test_ring_exposure_per_step_by_hand(ctx):
    # TP8 CP8, micro-batch 1: 1024 local tokens; K+V block 2 x 2 x 1024 x 128 = 524,288 B.
    # send K/V: 10 us + 524,288 / 45e9 = 21.651 us; K/V + dK/dV: 10 us + 1,048,576 / 45e9 = 33.302 us.
    # attention forward on the rank 0.5 x 4 x 1024 x 8192 x 8 x 128 / 3.5e14 = 49.087 us:
    # 6.136 us per step; backward 15.340 us per step.
    # forward  7 x (21.651 - 6.136)                        = 108.61 us
    # backward 2 x (21.651 - 15.340) + 6 x (33.302 - 15.340) = 12.62 + 107.77 = 120.39 us
    got = T.layer_cp_comm_s(ctx, tp=8, cp=8, recompute="none", micro_batch=1)
    assert got == pytest.approx(108.61e-6 + 120.39e-6, rel=2e-3)
    # selective / full recompute run the attention forward (and its ring) once more
    again = T.layer_cp_comm_s(ctx, tp=8, cp=8, recompute="selective", micro_batch=1)
    assert again - got == pytest.approx(108.61e-6, rel=2e-3)


def test_ring_inside_a_node_is_hidden(ctx):
    # TP1 CP8 inside one node (450 GB/s, 3 us): 8 KV heads x 128 = 1024 wide, 1024 tokens:
    # K+V 2 x 2 x 1024 x 1024 = 4,194,304 B -> 3 us + 9.32 us = 12.3 us per step; attention
    # per step 0.5 x 4 x 1024 x 8192 x 64 x 128 / 3.5e14 / 8 = 49.1 us: hidden.
    assert T.layer_cp_comm_s(ctx, tp=1, cp=8, recompute="none", micro_batch=1) == 0.0


def test_gradient_group_of_dp1_cp2_across_nodes_runs_at_the_network_speed(ctx):
    # TP8 CP2 DP1 PP32 on 512 GPUs: the gradient group is the CP pair, which spans two nodes
    # (CP stride 8 = one node): 45 GB/s, not the 450 GB/s of the (one-rank) DP group.
    lk = T._dp_link(ctx, 8, 2, 1, 32)
    assert (lk.size, lk.bandwidth_gb_s) == (2, 45.0)
    # ZeRO-1 reduce-scatter of the rank's gradients: 70.6e9 params / (8 x 32) x 2 bytes
    # = 551 MB in max(40M, 1M x 1) = 40M-element (80 MB) buckets; each bucket over 2 ranks:
    # 10 us + 1/2 x bucket / 45e9; in all about 551e6 / 2 / 45e9 = 6.1 ms (+ latency), not 0.6 ms.
    t = T.dp_traffic(ctx, tp=8, cp=2, dp=1, pp=32)
    local = ctx.params.total / (8 * 32) * ctx.training.precision.grad_bytes
    buckets = -(-local // (40e6 * ctx.training.precision.grad_bytes))
    assert t.reduce_scatter_s == pytest.approx(buckets * 10e-6 + local / 2 / 45e9, rel=1e-9)


def test_gradient_group_merges_cp_and_dp_in_megatron_order(ctx):
    # tp-cp-dp-pp: the DP x CP group of TP2 CP2 DP2 is 4 ranks of stride 2 in one node (450);
    # of TP4 CP2 DP16 it is 32 ranks of stride 4 over 16 nodes (45).
    assert (T._dp_link(ctx, 2, 2, 2, 64).size, T._dp_link(ctx, 2, 2, 2, 64).bandwidth_gb_s) == (4, 450.0)
    assert (T._dp_link(ctx, 4, 2, 16, 4).size, T._dp_link(ctx, 4, 2, 16, 4).bandwidth_gb_s) == (32, 45.0)
