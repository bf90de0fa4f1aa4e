"""Which modules "selective" recompute repeats, and the memory and time that follow from them.

Unit legend: `_bytes` bytes per GPU for one layer and one micro-batch; `_s` seconds; `_flops`
FLOPs per token; s b = micro_batch x seq / cp tokens, rep = 1/t with SP (else 1), H heads.

A dense model keeps each framework's `memory.selective_recompute` policy (Megatron's default
--recompute-modules core_attn; torchtitan's op-level policy). A mixture-of-experts model under
a framework whose profile states `memory.moe_selective_modules` (Megatron-Core: mla_up_proj,
layernorm, moe_act, the MoE README's memory recipe, NVIDIA/Megatron-LM d98e8a64) recomputes
that set instead, less what Megatron refuses for the model or recipe (transformer_config.py
L1964-2012: mla_up_proj needs MLA; the delayed FP8 recipe refuses moe_act and layernorm);
an empty set falls back to the default core_attn. Each module discards its outputs after use
(CheckpointWithoutOutput) and recomputes them in backward:
- core_attn: the attention core's stored values (memory.LayerActivations.attention_core) and
  its forward again;
- mla_up_proj: query, key and value, 2 s b (2 H d_qk + H d_v) / t bytes; the q/kv up-projection
  GEMMs and RoPE forward again (multi_latent_attention.py L983-989, L455-458);
- layernorm: the two norm outputs (the QKV/down-projection input and the MLP input), s b h rep
  values each at the bytes they were charged (1 with FP8 saved inputs, else 2); both norms'
  forward again (transformer_layer.py L470-536);
- moe_act: the routed experts' activation output (fc2's input), R F' values at the bytes it was
  charged; the activation function's forward again (experts.py L269-276, L1019-1030);
- mlp: a dense layer's MLP under standard checkpointing (its input kept): the FFN activations,
  and the FFN forward again; MoE layers are untouched (transformer_layer.py L538-540).
training.recompute_modules states the set explicitly (checked as Megatron does, check_modules).
"""
from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from solver.cost.compute import ACT_BYTES
from solver.cost.fp8 import FP8_BYTES

if TYPE_CHECKING:
    from solver.cost.terms import CostContext
    from solver.frameworks import FrameworkProfile
    from solver.specs import ModelSpec, TrainingSpec

CORE_ATTN = frozenset({"core_attn"})


@lru_cache(maxsize=256)
def selective_modules(ctx: CostContext) -> frozenset[str]:
    """The modules "selective" recomputes for ctx's model under its framework (modules_for)."""
    return modules_for(ctx.model, ctx.training, ctx.framework)


def modules_for(model: ModelSpec, training: TrainingSpec, framework: FrameworkProfile) -> frozenset[str]:
    """training.recompute_modules when given (checked: check_modules), else the framework's MoE
    selective set for a MoE model less what Megatron refuses for this model or recipe, else
    core_attn (module docstring)."""
    if training.recompute_modules is not None:
        check_modules(model, training)
        return frozenset(training.recompute_modules)
    cited = framework.memory.moe_selective_modules
    if model.moe is None or cited is None:
        return CORE_ATTN
    out = set(cited.value)
    if model.mla is None:
        out.discard("mla_up_proj")
    if training.compute_precision == "fp8-delayed":
        out -= {"moe_act", "layernorm"}
    return frozenset(out) or CORE_ATTN


def check_modules(model: ModelSpec, training: TrainingSpec) -> None:
    """Megatron-Core's checks on an explicit --recompute-modules (transformer_config.py L1964-2012
    d98e8a64). Raises: SpecError naming training.recompute_modules."""
    mods, why = set(training.recompute_modules or ()), []
    mcore = "NVIDIA/Megatron-LM d98e8a64 megatron/core/transformer/transformer_config.py L1964-2012"
    if training.framework != "megatron-core":
        where = {"torchtitan": "its SelectiveAC is per-op (pytorch/torchtitan b5bcd76c "
                               "torchtitan/distributed/activation_checkpoint.py L185-212)",
                 "deepspeed": "deepspeed.checkpointing.checkpoint wraps what the model code passes it "
                              "(deepspeedai/DeepSpeed edaa7221 deepspeed/runtime/activation_checkpointing/"
                              "checkpointing.py)"}.get(training.framework, "")
        why.append(f"{training.framework} has no per-module selective recompute (a Megatron-Core option): {where}")
    if "mla_up_proj" in mods and model.mla is None:
        why.append(f"mla_up_proj needs multi-head latent attention (model.mla) ({mcore})")
    if "moe_act" in mods and model.moe is None:
        why.append(f"moe_act needs a mixture-of-experts model (model.moe) ({mcore})")
    if mods & {"moe_act", "layernorm"} and training.compute_precision == "fp8-delayed":
        why.append(f"delayed FP8 scaling refuses moe_act and layernorm recompute ({mcore})")
    if why:
        from solver.errors import Problem, SpecError
        raise SpecError("training.recompute_modules: " + "; ".join(why),
                        [Problem("training.recompute_modules", w) for w in why])


def module_list(model: ModelSpec, training: TrainingSpec, framework: FrameworkProfile) -> list[str]:
    """modules_for in the order of Megatron's --recompute-modules help (the export's order)."""
    order = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp")
    mods = modules_for(model, training, framework)
    return [m for m in order if m in mods]


def saved_bytes_per_value(ctx: CostContext) -> float:
    """Bytes a saved GEMM input is charged at: 1 with FP8 saved inputs (Transformer Engine), else 2."""
    w = ctx.fp8_work
    return float(FP8_BYTES) if (w is not None and w.saved_inputs_fp8) else float(ACT_BYTES)


def dropped_dense_bytes(ctx: CostContext, *, tp: int, cp: int, sp: bool, micro_batch: int) -> float:
    """Bytes one layer no longer keeps under the model's selective set beyond the attention
    core (core_attn's part is memory.layer_activation_parts' attention_core): mla_up_proj's
    query, key and value; layernorm's two norm outputs."""
    mods, m = selective_modules(ctx), ctx.model
    s_b = ctx.seq_len / cp * micro_batch
    out = 0.0
    if "mla_up_proj" in mods and m.mla is not None:
        a = m.mla
        out += ACT_BYTES * s_b * m.heads / tp * (2 * a.qk_head_dim + a.v_head_dim)
    if "layernorm" in mods:
        out += 2 * s_b * m.hidden * (1.0 / tp if sp else 1.0) * saved_bytes_per_value(ctx)
    return out + mlp_dropped_bytes(ctx, tp=tp, cp=cp, micro_batch=micro_batch)


def mlp_dropped_bytes(ctx: CostContext, *, tp: int, cp: int, micro_batch: int) -> float:
    """Under mlp (a dense layer's MLP checkpointed, standard checkpointing that keeps its input):
    the FFN's activation input(s) and output, 2 s b (F / t)(g + 1), less the byte the FP8 saved
    inputs already took off the FFN-down input; 0 without mlp. A MoE layer's MLP is not a dense
    MLP (transformer_layer.py L538-540): moe_memory adds this back for MoE layers."""
    if "mlp" not in selective_modules(ctx):
        return 0.0
    m = ctx.model
    s_b, ffn = ctx.seq_len / cp * micro_batch, m.ffn_hidden / tp
    out = ACT_BYTES * s_b * ffn * ((2 if m.ffn_gated else 1) + 1)
    return out - (s_b * ffn * (ACT_BYTES - FP8_BYTES) if saved_bytes_per_value(ctx) == FP8_BYTES else 0.0)


def mlp_recompute_s(ctx: CostContext, *, tp: int, cp: int, micro_batch: int) -> float:
    """Under mlp, a dense layer's MLP forward again, seconds per micro-batch (moe_layer.
    dense_ffn_times' forward: FFN GEMMs, activation, FP8 casts); 0 without mlp."""
    if "mlp" not in selective_modules(ctx):
        return 0.0
    from solver.cost.moe_layer import dense_ffn_times
    return dense_ffn_times(ctx.model, ctx.seq_len, ctx.cluster.gpu, ctx.options, tp=tp, cp=cp,
                           micro_batch=micro_batch, fp8=ctx.fp8_work)[0]


def dropped_moe_bytes(ctx: CostContext, *, routed_rows: float, width: float, norm_rows: float,
                      shard_tokens: float, shared: bool) -> float:
    """Bytes one MoE layer no longer keeps beyond dropped_dense_bytes under the selective set:
    moe_act's routed activation output (routed_rows x width at the bytes it was charged); with
    layernorm under FP8 saved inputs, what moe_memory added back for the norm output (kept in
    BF16 for the router: norm_rows x h at 1 byte more) and the shared experts' fc1 FP8 copy of
    its sequence shard (shard_tokens x h at 1 byte): both go with the discarded norm output."""
    mods, h = selective_modules(ctx), ctx.model.hidden
    out = routed_rows * width * saved_bytes_per_value(ctx) if "moe_act" in mods else 0.0
    if "layernorm" in mods and saved_bytes_per_value(ctx) == FP8_BYTES:
        out += (ACT_BYTES - FP8_BYTES) * norm_rows * h + (FP8_BYTES * shard_tokens * h if shared else 0.0)
    return out


def moe_act_recompute_s(ctx: CostContext, *, routed_rows: float, width: float) -> float:
    """moe_act's forward again, seconds per MoE layer and micro-batch: the activation reads the
    routed fc1 output and writes its result (SwiGLU 6 F' bytes per row, else 4 F'; compute.
    elementwise_fwd_bytes' activation term) at achievable HBM bandwidth; 0 without moe_act."""
    if "moe_act" not in selective_modules(ctx):
        return 0.0
    per_row = (6 if ctx.model.ffn_gated else 4) * width
    return per_row * routed_rows / (ctx.cluster.gpu.hbm_gb_s * 1e9 * ctx.options.hbm_fraction)


def up_proj_flops_per_token(ctx: CostContext) -> float:
    """Forward FLOPs per token of one layer's MLA up projections (q up: r_q x H d_qk, or the
    full query projection without q_lora_rank; kv up: r_kv x H (d_nope + d_v)), 2 per MAC."""
    m = ctx.model
    a = m.mla
    if a is None:
        return 0.0
    q_in = a.q_lora_rank if a.q_lora_rank is not None else m.hidden
    return 2.0 * m.heads * (q_in * a.qk_head_dim + a.kv_lora_rank * (a.qk_nope_head_dim + a.v_head_dim))


def recompute_flops_per_token(ctx: CostContext, attn_fwd_flops: float) -> float:
    """Forward FLOPs per token selective recompute repeats over the model's layers (HFU):
    the attention core's forward (`attn_fwd_flops`, all layers) when core_attn is in the set,
    every layer's MLA up projections under mla_up_proj, the dense layers' FFN under mlp. Norms
    and activations are elementwise (no GEMM FLOPs)."""
    mods = selective_modules(ctx)
    out = attn_fwd_flops if "core_attn" in mods else 0.0
    if "mla_up_proj" in mods:
        out += up_proj_flops_per_token(ctx) * (ctx.model.layers + ctx.model.mtp_layers)
    if "mlp" in mods:  # the dense layers' FFN forward (2 FLOPs per weight per token)
        out += 2.0 * ctx.params.ffn_per_layer * ctx.params.dense_layers
    return out
