"""torchtitan export of a mixture-of-experts model: the `_model()` function of the
configuration module, written with torchtitan's own MoE model modules at pytorch/torchtitan
b5bcd76c66d0acb1a08b176d9639425bc55e0b2a (tests/fixtures/frameworks/torchtitan.json holds every
name used, extracted by benchmarks/extract_framework_options.py):

- standard attention: Qwen3's decoder (torchtitan/models/qwen3/model.py Qwen3Model,
  Qwen3TransformerBlock, whose block takes a dense feed_forward or a moe per layer) built
  layer by layer with torchtitan/models/common/config_utils.py: make_gqa_config (fused QKV,
  qk_norm an RMSNorm of head_dim or None), make_moe_config / make_router_config /
  make_routed_experts_config (score_func softmax | sigmoid, top_k, route_norm, route_scale,
  num_expert_groups / num_limited_groups: the model's routing details; shared experts a
  make_ffn_config of shared_experts x width), make_ffn_config for the dense layers; the
  registry entry, parallelize_qwen3 and the MoE load-balancing hook come from qwen3's
  model_registry("30B-A3B"), its model replaced;
- latent attention: DeepSeek-V3's build_mla_moe_layers (torchtitan/models/deepseek_v3/
  __init__.py: the first n_dense_layers dense, the rest MoE with num_shared_experts x
  moe_hidden_dim shared experts; q_lora_rank 0 = a full-rank query) and DeepSeekV3Model.

The token dispatcher is the "standard" all-to-all (config_utils.make_token_dispatcher_config ->
AllToAllTokenDispatcher, dropless); auxiliary-loss-free balancing (MoE.load_balance_coeff,
torchtitan/models/common/moe.py: the expert_bias_E buffer) is on exactly when the model has a
router score-correction bias. Expert parallelism is ParallelismConfig.expert_parallel_degree
(torchtitan/config/configs.py); torchtitan has no expert-TP degree (the profile's
expert_tensor_parallel rule). What the model spec cannot express is refused up front by
solver.frameworks.models.
"""
from __future__ import annotations

from service.launchers.common import model_values
from solver.model_parts import MLASpec, MoESpec
from solver.specs import ModelSpec, TrainingSpec

QWEN3_FLAVOR = "30B-A3B"       # qwen3's MoE registry entry whose model is replaced
DEEPSEEK_FLAVOR = "671B"       # deepseek_v3's registry entry whose model is replaced

QWEN3_IMPORTS = '''from torchtitan.models.common import CosSinRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.config_utils import (
    decoder_vocab_size,
    get_attention_config,
    make_ffn_config,
    make_gqa_config,
    make_moe_config,
    make_routed_experts_config,
    make_router_config,
)
from torchtitan.models.qwen3 import (
    _EMBEDDING_INIT,
    _EMBEDDING_SKIP_INIT,
    _LINEAR_INIT,
    _NORM_INIT,
    _moe_experts_init,
    _residual_output_init,
    model_registry,
)
from torchtitan.models.qwen3.model import Qwen3Model, Qwen3TransformerBlock
'''

DEEPSEEK_IMPORTS = '''from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.config_utils import decoder_vocab_size
from torchtitan.models.deepseek_v3 import (
    _EMBEDDING_INIT,
    _LINEAR_INIT,
    _NORM_INIT,
    _depth_experts_init,
    _depth_init,
    _output_linear_init,
    build_mla_moe_layers,
    model_registry,
)
from torchtitan.models.deepseek_v3.model import DeepSeekV3Model
'''



def _experts(m: ModelSpec) -> MoESpec:
    """The model's MoE part (callers export MoE models only)."""
    if m.moe is None:
        raise ValueError(f"{m.name} has no experts")
    return m.moe


def _latent(m: ModelSpec) -> MLASpec:
    """The model's MLA part (callers pass MLA models only)."""
    if m.mla is None:
        raise ValueError(f"{m.name} has no latent attention")
    return m.mla

# Multi-token prediction (DeepSeek-V3 report sec. 2.2), as torchtitan b5bcd76c builds it:
# DeepSeekV3Model is an MTPDecoder (deepseek_v3/mtp.py) whose Config.mtp_layers holds one
# MTPTransformerBlock per depth, built by deepseek_v3/__init__.py _build_mtp_layers from the last
# decoder layer's config (a copy of its MLA attention and MoE, plus enorm / hnorm / mtp_norm of
# RMSNorm and eh_proj, a bias-free 2 dim -> dim Linear); the loss is MTPLoss (the main
# cross-entropy + mtp_scale x the mean of the depths' cross-entropies; config_registry.py
# deepseek_v3_debugmodel_mtp). mtp_scale: MTPLoss.Config's default 0.3 (mtp.py L326), DeepSeek-V3's
# weight for its first 10T tokens (report sec. 4.2: 0.3, then 0.1 for the last 4.8T).
MTP_LOSS_SCALE = 0.3
MTP_IMPORTS = "from torchtitan.models.deepseek_v3 import MTPLoss, _build_mtp_layers\n"


def moe_imports(m: ModelSpec) -> str:
    """The import block of the configuration module for this MoE model."""
    if m.mla is None:
        return QWEN3_IMPORTS
    return DEEPSEEK_IMPORTS + (MTP_IMPORTS if m.mtp_layers else "")


# FP8 of a MoE model (pytorch/torchtitan b5bcd76c; solver.cost.fp8.FP8_MOE_RECIPES): the linear
# converter as in the dense export, with the router gate and the MTP eh_proj left BF16 besides the
# LM head (solver.cost.moe_layer and solver.cost.mtp charge them in BF16), plus the grouped-experts
# converter for the routed experts' grouped GEMMs, which swaps the "standard" dispatcher for
# TorchAOTokenDispatcher (utils.py swap_token_dispatcher: pads each expert's rows; EP 1 runs too,
# models/common/token_dispatcher.py L631-645):
# - fp8-rowwise: Float8LinearConverter with filter_fqns (float8.md's MoE example filters
#   "router.gate") + Float8GroupedExpertsConverter (float8.py L216-266, rows padded to 16);
# - mxfp8: MXFP8LinearConverter with the include list of deepseek_v3's own
#   deepseek_v3_debugmodel_mxfp8 (config_registry.py L85-109: attention, shared experts and dense
#   FFNs; router gate, eh_proj and LM head not matched) + MXFP8GroupedExpertsConverter with
#   pad_multiple 128, "required by the CuTeDSL quantization kernel on sm_100" (same config).
MOE_FP8_CONVERTERS = {
    "fp8-rowwise": [("Float8LinearConverter", 'Float8LinearConverter.Config(recipe_name="rowwise", '
                                              'filter_fqns=["lm_head", "router.gate", "eh_proj"])'),
                    ("Float8GroupedExpertsConverter", "Float8GroupedExpertsConverter.Config()")],
    "mxfp8": [("MXFP8LinearConverter", 'MXFP8LinearConverter.Config(fqns=["attention", "shared_experts", '
                                       '"feed_forward"])'),
              ("MXFP8GroupedExpertsConverter", "MXFP8GroupedExpertsConverter.Config(pad_multiple=128)")],
}


def moe_fp8_converters(precision: str) -> list[tuple[str, str]]:
    """(class, config expression) of each converter the FP8 recipe applies to a MoE model."""
    return MOE_FP8_CONVERTERS[precision]


def mtp_loss_code() -> str:
    """Trainer.Config.loss for a model with multi-token prediction (MTPLoss; see MTP_LOSS_SCALE)."""
    return (f"MTPLoss.Config(\n        mtp_scale={MTP_LOSS_SCALE!r}, "
            "global_vocab_size=decoder_vocab_size(config.model_spec),\n    )")


def _mtp_code(m: ModelSpec, eps: float) -> tuple[str, str]:
    """(the statements building the MTP layers after the decoder layers, the Config argument);
    empty strings without MTP."""
    if not m.mtp_layers:
        return "", ""
    return f'''
    mtp_layers = _build_mtp_layers(layers[-1], dim={m.hidden}, num_mtp_layers={m.mtp_layers})
    for mtp in mtp_layers:  # the copied attention / FFN norms carry eps already
        mtp.enorm.eps = {eps!r}
        mtp.hnorm.eps = {eps!r}
        mtp.mtp_norm.eps = {eps!r}''', "\n        mtp_layers=mtp_layers,"


def registry_call(m: ModelSpec) -> str:
    """The model_registry call whose ModelSpec (parallelize / pipelining / hooks) is reused."""
    return f'model_registry("{DEEPSEEK_FLAVOR if m.mla is not None else QWEN3_FLAVOR}")'


def _yarn(m: ModelSpec) -> tuple[str, float]:
    """ComplexRoPE's scaling arguments and the attention mscale (torchtitan/models/common/rope.py
    L97-107, deepseek_v3/model.py L87-88: HF's mscale_all_dim); unscaled: 'none', 1.0."""
    r = m.rope_scaling
    if r is None:
        return 'scaling="none",', 1.0
    return (f'scaling="yarn", rope_factor={float(r.factor)!r}, beta_fast={r.beta_fast!r}, '
            f'beta_slow={r.beta_slow!r}, original_seq_len={r.original_max_positions},',
            r.mscale_all_dim if r.mscale_all_dim is not None else 1.0)


def llama_rope_scaling(m: ModelSpec) -> str:
    """ComplexRoPE's scaling arguments for the dense Llama 3 export (torchtitan/models/common/
    rope.py L97-102: scaling "llama", scaling_factor, low/high_freq_factor,
    original_max_position_embeddings, as HF's llama3 rope_scaling); 'none' without scaling."""
    r = m.rope_scaling
    if r is None or r.kind != "llama3":
        return 'scaling="none",'
    return (f'scaling="llama", scaling_factor={float(r.factor)!r}, low_freq_factor={r.low_freq_factor!r}, '
            f'high_freq_factor={r.high_freq_factor!r}, original_max_position_embeddings={r.original_max_positions},')


def _groups(e: MoESpec) -> tuple[str, str]:
    """num_expert_groups / num_limited_groups (None, None without group-limited routing;
    TokenChoiceTopKRouter ranks groups by the sum of their two best scores, as DeepSeek-V3)."""
    return (str(e.router_groups), str(e.router_group_topk)) if e.group_limited else ("None", "None")


def _mask(m: ModelSpec) -> list[bool]:
    return [_experts(m).is_moe_layer(i) for i in range(m.layers)]


def _qwen3_model_code(m: ModelSpec, t: TrainingSpec) -> str:
    e, v = _experts(m), model_values(m)
    qk = f"_norm({m.head_dim})" if m.qk_norm == "head" else "None"
    shared = "None" if not e.shared_experts else (
        f"make_ffn_config(dim={m.hidden}, hidden_dim={e.shared_experts * e.shared_width}, "
        "w1_param_init=_LINEAR_INIT, w2w3_param_init=output_init)")
    balance = "1e-3" if e.router_bias else "None"
    embed = "_EMBEDDING_SKIP_INIT" if m.tied_embeddings else "_EMBEDDING_INIT"
    return f'''MOE_LAYERS = {_mask(m)!r}


def _norm(size: int) -> RMSNorm.Config:
    return RMSNorm.Config(normalized_shape=size, eps={v.norm_eps!r}, param_init=_NORM_INIT)


def _layer(moe: bool) -> Qwen3TransformerBlock.Config:
    output_init = _residual_output_init({m.layers})
    attention = make_gqa_config(
        dim={m.hidden}, n_heads={m.heads}, n_kv_heads={m.kv_heads}, head_dim={m.head_dim},
        wqkv_param_init=_LINEAR_INIT, wo_param_init=output_init,
        inner_attention=get_attention_config("flex"), fuse_qkv=True,
        rope=CosSinRoPE.Config(
            dim={m.head_dim}, max_context_length={m.max_positions or t.seq_len}, theta={v.rope_base!r},
        ),
        qk_norm={qk},
    )
    if not moe:
        ffn = make_ffn_config(dim={m.hidden}, hidden_dim={m.ffn_hidden}, w1_param_init=_LINEAR_INIT,
                              w2w3_param_init=output_init)
        return Qwen3TransformerBlock.Config(attention=attention, feed_forward=ffn,
                                            attention_norm=_norm({m.hidden}), ffn_norm=_norm({m.hidden}))
    experts = make_moe_config(
        num_experts={e.experts},
        router=make_router_config(dim={m.hidden}, num_experts={e.experts}, gate_param_init=_LINEAR_INIT,
                                  top_k={e.experts_per_token}, score_func="{e.router}",
                                  route_norm={e.router_topk_norm!r}, route_scale={e.router_scale!r},
                                  num_expert_groups={_groups(e)[0]}, num_limited_groups={_groups(e)[1]}),
        routed_experts=make_routed_experts_config(
            dim={m.hidden}, hidden_dim={e.expert_ffn_hidden}, num_experts={e.experts}, top_k={e.experts_per_token},
            param_init=_moe_experts_init({m.layers}), comm_backend="standard"),
        shared_experts={shared},
        load_balance_coeff={balance},
    )
    return Qwen3TransformerBlock.Config(attention=attention, moe=experts,
                                        attention_norm=_norm({m.hidden}), ffn_norm=_norm({m.hidden}))


def _model() -> Qwen3Model.Config:
    """{m.name}: {m.layers} layers, {e.moe_layer_count(m.layers)} MoE ({e.experts} experts)."""
    return Qwen3Model.Config(
        dim={m.hidden},
        vocab_size={m.vocab},
        enable_weight_tying={m.tied_embeddings!r},
        norm=_norm({m.hidden}),
        tok_embeddings=Embedding.Config(num_embeddings={m.vocab}, embedding_dim={m.hidden}, param_init={embed}),
        lm_head=Linear.Config(in_features={m.hidden}, out_features={m.vocab}, param_init=_LINEAR_INIT),
        layers=[_layer(moe) for moe in MOE_LAYERS],
    )
'''


def _deepseek_model_code(m: ModelSpec, t: TrainingSpec) -> str:
    e, a, v = _experts(m), _latent(m), model_values(m)
    balance = "" if e.router_bias else '''
    for block in layers:  # no score-correction bias in this model: no auxiliary-loss-free balancing
        if block.moe is not None:
            block.moe.load_balance_coeff = None'''
    mtp_build, mtp_arg = _mtp_code(m, v.norm_eps)
    mtp_doc = f", {m.mtp_layers} MTP layer(s)" if m.mtp_layers else ""
    return f'''def _model() -> DeepSeekV3Model.Config:
    """{m.name}: {m.layers} layers ({e.first_dense_layers} dense), MLA, {e.experts} experts{mtp_doc}."""
    layers = build_mla_moe_layers(
        n_layers={m.layers},
        n_dense_layers={e.first_dense_layers},
        dim={m.hidden},
        n_heads={m.heads},
        q_lora_rank={a.q_lora_rank or 0},
        kv_lora_rank={a.kv_lora_rank},
        qk_nope_head_dim={a.qk_nope_head_dim},
        qk_rope_head_dim={a.qk_rope_head_dim},
        v_head_dim={a.v_head_dim},
        mscale={_yarn(m)[1]!r},
        dense_hidden_dim={m.ffn_hidden},
        moe_hidden_dim={e.expert_ffn_hidden},
        num_experts={e.experts},
        num_shared_experts={e.shared_experts},
        router_top_k={e.experts_per_token},
        router_score_func="{e.router}",
        router_route_norm={e.router_topk_norm!r},
        router_route_scale={e.router_scale!r},
        router_num_expert_groups={_groups(e)[0]},
        router_num_limited_groups={_groups(e)[1]},
        attn_backend="flex",
        moe_comm_backend="standard",
        non_blocking_capacity_factor=None,
        linear_init=_LINEAR_INIT,
        norm_init=_NORM_INIT,
        depth_init=_depth_init,
        depth_experts_init=_depth_experts_init,
        rope=ComplexRoPE.Config(
            dim={a.qk_rope_head_dim}, max_context_length={m.max_positions or t.seq_len}, theta={v.rope_base!r},
            {_yarn(m)[0]}
        ),
    )
    for block in layers:
        block.attention_norm.eps = {v.norm_eps!r}
        block.ffn_norm.eps = {v.norm_eps!r}{balance}{mtp_build}
    return DeepSeekV3Model.Config(
        dim={m.hidden},
        vocab_size={m.vocab},
        enable_weight_tying={m.tied_embeddings!r},
        tok_embeddings=Embedding.Config(num_embeddings={m.vocab}, embedding_dim={m.hidden}, param_init=_EMBEDDING_INIT),
        norm=RMSNorm.Config(normalized_shape={m.hidden}, eps={v.norm_eps!r}, param_init=_NORM_INIT),
        lm_head=Linear.Config(
            in_features={m.hidden}, out_features={m.vocab}, param_init=_output_linear_init({m.hidden}),
        ),
        layers=layers,{mtp_arg}
    )
'''


def moe_model_code(m: ModelSpec, t: TrainingSpec) -> str:
    """The `_model()` function (and its helpers) for a MoE model."""
    return _deepseek_model_code(m, t) if m.mla is not None else _qwen3_model_code(m, t)


def moe_notes(m: ModelSpec) -> list[str]:
    """What the MoE module leaves to the user."""
    notes = ["the standard all-to-all token dispatcher drops no tokens (torchtitan "
             "models/common/config_utils.py make_token_dispatcher_config)"]
    if m.mtp_layers:
        notes.append(f"multi-token prediction: {m.mtp_layers} MTP layer(s) and MTPLoss with mtp_scale "
                     f"{MTP_LOSS_SCALE} (torchtitan's default, DeepSeek-V3's first 10T tokens; the report lowers "
                     "it to 0.1 for the rest): the loss weight is not in the model spec, set it for your run; "
                     "torchtitan runs MTP at pp 1 and cp 1 only (deepseek_v3/mtp.py)")
    return notes
