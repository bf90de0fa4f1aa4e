"""Megatron-LM arguments of a mixture-of-experts model and its expert layout, and of
multi-head latent attention (MLA).

Option names, types and choices are Megatron-LM's own at NVIDIA/Megatron-LM d98e8a64
(tests/fixtures/frameworks/megatron.json, extracted by benchmarks/extract_framework_options.py):
- --num-experts, --moe-layer-freq: megatron/training/arguments.py (_add_moe_args; moe_freq_type
  takes an int or a Python list expression of 1 (MoE) / 0 (dense) per layer, its length the
  layer count);
- --moe-router-topk, --moe-ffn-hidden-size, --moe-shared-expert-intermediate-size (the TOTAL
  width of all shared experts: "num_shared_experts * ffn_size_of_each_shared_expert"),
  --moe-shared-expert-gate, --moe-router-score-function, --moe-router-enable-expert-bias,
  --moe-grouped-gemm, --moe-token-dispatcher-type (default 'allgather'), --moe-router-pre-softmax,
  --moe-router-topk-scaling-factor, --moe-router-num-groups, --moe-router-group-topk,
  --moe-apply-probs-on-input (routing_args),
  --moe-expert-capacity-factor, --moe-pad-expert-input-to-capacity (needs the capacity factor):
  megatron/core/transformer/transformer_config.py;
- --expert-model-parallel-size, --expert-tensor-parallel-size,
  --overlap-moe-expert-parallel-comm: megatron/core/model_parallel_config.py;
- --multi-latent-attention (transformer_config.py), --q-lora-rank (None: a full-rank query
  projection), --kv-lora-rank, --qk-head-dim (the non-rope part: "q_head_dim = qk_head_dim +
  qk_pos_emb_head_dim"), --qk-pos-emb-head-dim, --v-head-dim (arguments.py, MLATransformerConfig);
- --mtp-num-layers (transformer_config.py: the number of multi-token-prediction layers).
The export asks for what the cost model charges (solver.cost.moe_layer): the alltoall token
dispatcher and grouped expert GEMMs.
Rules (same commit): --overlap-moe-expert-parallel-comm needs EP > 1 and, with PP > 1, virtual
pipeline stages (transformer_config.py L3005-3020); the expert capabilities (MoE with TP needs
SP, ETP, expert ranks) are the megatron-core profile's, checked by common.expert_capability_rules.
"""
from __future__ import annotations

from itertools import groupby

from solver.cost.moe_comm import moe_overlap_problems
from solver.cost.recompute import module_list
from solver.frameworks import load_framework
from solver.model_parts import MoESpec
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec


def layer_freq(moe: MoESpec, layers: int) -> str | None:
    """--moe-layer-freq as Megatron's list expression, run-length coded (e.g. '([0]*3+[1]*58)'
    for DeepSeek-V3's three dense layers); None when every layer is MoE (the default, 1)."""
    mask = [int(moe.is_moe_layer(i)) for i in range(layers)]
    if all(mask):
        return None
    runs = [f"[{v}]*{len(list(g))}" for v, g in groupby(mask)]
    return "(" + "+".join(runs) + ")"


def moe_rules(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec) -> list[tuple[str, str]]:
    """Megatron-LM's MoE checks that the layout breaks (empty for a dense model): the A2A
    overlap rule is the cost model's and the search's (solver.cost.moe_comm.moe_overlap_problems); MoE with TP
    needing SP is the profile's moe_tp_needs_sp (common.expert_capability_rules)."""
    if m.moe is None or not t.moe_a2a_overlap:
        return []
    return [("training.moe_a2a_overlap", reason)
            for reason in moe_overlap_problems(layout.pp, layout.vpp, layout.ep, layout.recompute)]


def moe_args(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec) -> list[str]:
    """The expert model and layout arguments ([] for a dense model)."""
    e = m.moe
    if e is None:
        return []
    args = ["--num-experts", str(e.experts), "--moe-router-topk", str(e.experts_per_token),
            "--moe-ffn-hidden-size", str(e.expert_ffn_hidden),
            "--expert-model-parallel-size", str(layout.ep),
            "--expert-tensor-parallel-size", str(layout.expert_tp),
            "--moe-grouped-gemm", "--moe-token-dispatcher-type", "alltoall",
            "--moe-router-score-function", e.router]
    if e.router_bias:
        args.append("--moe-router-enable-expert-bias")
    args += routing_args(e)
    if e.shared_experts:
        args += ["--moe-shared-expert-intermediate-size", str(e.shared_experts * e.shared_width)]
        if e.shared_expert_gate:
            args.append("--moe-shared-expert-gate")
    freq = layer_freq(e, m.layers)
    if freq is not None:
        args += ["--moe-layer-freq", freq]
    if t.moe_capacity_factor is not None:
        args += ["--moe-expert-capacity-factor", repr(t.moe_capacity_factor)]
        if t.moe_pad_to_capacity:
            args.append("--moe-pad-expert-input-to-capacity")
    if t.moe_a2a_overlap:
        args.append("--overlap-moe-expert-parallel-comm")
    return args


def routing_args(e: MoESpec) -> list[str]:
    """Routing details (transformer_config.py L780-812, L949 d98e8a64; semantics in
    moe_utils.py topk_routing_with_score_function): softmax without renormalisation is
    --moe-router-pre-softmax (softmax over all experts, then top-k); the routed-weight factor
    --moe-router-topk-scaling-factor; group-limited routing --moe-router-num-groups /
    --moe-router-group-topk; weights on the expert input --moe-apply-probs-on-input. Sigmoid
    renormalisation and the group score are fixed in Megatron; solver.frameworks.models refuses
    a model that differs from them."""
    args = []
    if e.router == "softmax" and not e.router_topk_norm:
        args.append("--moe-router-pre-softmax")
    if e.router_scale != 1.0:
        args += ["--moe-router-topk-scaling-factor", repr(e.router_scale)]
    if e.group_limited:
        args += ["--moe-router-num-groups", str(e.router_groups), "--moe-router-group-topk", str(e.router_group_topk)]
    if e.router_on_input:
        args.append("--moe-apply-probs-on-input")
    return args


def recompute_module_args(m: ModelSpec, t: TrainingSpec, layout: LayoutSpec) -> list[str]:
    """--recompute-modules for selective recompute of a MoE model: the set the cost model charges
    (solver.cost.recompute.module_list, the megatron-core profile's memory.moe_selective_modules);
    training.recompute_modules when given; [] for a dense model without them (Megatron's default,
    core_attn) and for other recompute levels.
    (moemem's addition to this file: transformer_config.py L534-575 d98e8a64, a List[str].)"""
    if layout.recompute != "selective" or (m.moe is None and t.recompute_modules is None):
        return []
    return ["--recompute-modules", *module_list(m, t, load_framework("megatron-core"))]


def mla_args(m: ModelSpec) -> list[str]:
    """Multi-head latent attention arguments ([] for standard attention)."""
    a = m.mla
    if a is None:
        return []
    args = ["--multi-latent-attention", "--kv-lora-rank", str(a.kv_lora_rank),
            "--qk-head-dim", str(a.qk_nope_head_dim), "--qk-pos-emb-head-dim", str(a.qk_rope_head_dim),
            "--v-head-dim", str(a.v_head_dim)]
    if a.q_lora_rank is not None:
        args += ["--q-lora-rank", str(a.q_lora_rank)]
    return args


def rope_variant_args(m: ModelSpec) -> list[str]:
    """Llama 4's QK L2 norm (--qk-l2-norm, transformer_config.py L262) and NoPE layers
    (--no-rope-freq N: every N-th layer skips RoPE, arguments.py L2428), and RoPE scaling:
    with MLA --rope-type rope | yarn, --rotary-scaling-factor, --mscale, --mscale-all-dim
    (MLATransformerConfig L3306-3330, fields copied from the same-named arguments;
    original_max_position_embeddings 4096 and beta_fast / beta_slow 32 / 1 have no argument and
    keep those defaults), without MLA llama3 scaling --use-rope-scaling --rope-scaling-factor
    (rotary_pos_embedding.py L84-99: low / high frequency factors 1 / 4, original 8192 fixed).
    What these cannot express is refused by solver.frameworks.models."""
    args = ["--qk-l2-norm"] if m.qk_norm == "l2" else []
    if m.nope_layer_interval:
        args += ["--no-rope-freq", str(m.nope_layer_interval)]
    r = m.rope_scaling
    if m.mla is not None:  # MLA's default rope_type is yarn: always say which
        args += ["--rope-type", "rope"] if r is None else [
            "--rope-type", "yarn", "--rotary-scaling-factor", repr(r.factor),
            "--mscale", repr(r.mscale), "--mscale-all-dim", repr(r.mscale_all_dim)]
    elif r is not None:
        args += ["--use-rope-scaling", "--rope-scaling-factor", repr(r.factor)]
    return args


def mtp_args(m: ModelSpec) -> list[str]:
    """Multi-token-prediction layers ([] without them)."""
    return ["--mtp-num-layers", str(m.mtp_layers)] if m.mtp_layers else []


def moe_notes(m: ModelSpec) -> list[str]:
    """What the MoE arguments leave to the user."""
    if m.moe is None:
        return []
    return ["MoE load balancing is not in the model spec: no auxiliary loss coefficient "
            "(--moe-aux-loss-coeff 0); set it to the model's recipe"]
