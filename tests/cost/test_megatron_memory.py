"""Megatron-Core memory semantics of the exported arguments, read at NVIDIA/Megatron-LM d98e8a64
(each counted by hand; each test fails on the code before it)."""
from solver.cost.memory import comm_buffer_bytes, dp_buffer_bytes
from solver.cost.options import CostOptions
from solver.cost.terms import CostContext
from solver.presets import load_model
from solver.specs import TrainingSpec
from topology.catalog import load_cluster

S = 8192


def ctx(framework):
    training = TrainingSpec(seq_len=S, global_batch_tokens=S * 64, framework=framework)
    return CostContext(load_model("llama3-8b"), load_cluster("seed-512"), training, CostOptions())


def test_megatron_ddp_reduces_in_its_gradient_buffer():
    # DDP and the distributed optimizer reduce-scatter / all-reduce each bucket in place on the
    # contiguous gradient buffer (param_and_grad_buffer.py start_grad_sync L700-731) that the
    # recipe's 4 bytes/param of gradients already are: no bucket memory at ZeRO 0/1. Charged
    # before: two 40M-element buckets x 2 bytes = 160,000,000 bytes. Llama 3 8B, TP1 DP8 PP1
    # without SP: nothing else in comm_buffer_bytes.
    c = ctx("megatron-core")
    for zero in (0, 1):
        assert dp_buffer_bytes(c, dp=8, cp=1, zero=zero, tp=1, pp=1) == 0.0
        assert comm_buffer_bytes(c, tp=1, cp=1, dp=8, pp=1, sp=False, zero=zero, micro_batch=1) == 0.0
    # Megatron-FSDP (ZeRO 2/3) reduce-scatters per-unit gradient buffers: the default two buckets stay.
    assert dp_buffer_bytes(c, dp=8, cp=1, zero=3, tp=1, pp=1) == 2 * 40_000_000 * 2
    # torchtitan's FSDP2 charges its own reduce-scatter copy (tests/cost/test_torchtitan_fsdp_memory.py).
