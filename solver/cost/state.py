"""Per-GPU model state under the framework's own precision recipe (per-layout memory).

Unit legend: `_bytes` bytes; `bytes_per_param` bytes per parameter of the rank's share.

The plan's capacity section keeps the seed's 12-byte accounting (accounting.
per_gpu_model_state_bytes with training.precision); every per-layout memory figure of the
cost model uses the recipe of training.framework instead (solver/data/frameworks/<name>.json,
each recipe cited to the framework source): a part of each state kept whole on every rank
plus a part sharded over the DP x CP group (d ranks). E.g. Megatron-Core BF16 with the
distributed optimizer (ZeRO-1): 2 (BF16 weights) + 4 (FP32 main grads, full size) +
12/d (FP32 main params + two FP32 Adam moments) = 6 + 12/d bytes per parameter (Megatron-LM
docs/user-guide/features/dist_optimizer.md). A training spec that states `precision`
explicitly keeps the framework's sharding, with the bytes of it the framework's export can set
(solver.frameworks.precision.realised_state: Megatron-LM's state-dtype options, DeepSpeed's
BF16 master and optimizer-state keys) and the framework's own bytes for the rest.
"""
from __future__ import annotations

from functools import lru_cache

from solver.cost.accounting import ParameterCounts, StateBytes
from solver.frameworks import StateRecipe, load_framework
from solver.frameworks.precision import StateDtypes, realised_state
from solver.specs import TrainingSpec

BF16_BYTES = 2  # unsharded compute copies gathered by ZeRO-3 / FSDP are BF16 in every profile


def state_recipe(training: TrainingSpec, zero: int, pp: int) -> StateRecipe:
    """The framework's recipe for a ZeRO stage at this PP; for a stage the framework does
    not run at this PP (the estimate flags it), its recipe for that stage at any PP. When
    the training spec states `precision` explicitly, the bytes of it the framework's export
    sets replace the recipe's (realised_state, with_precision)."""
    r = _framework_recipe(training.framework, zero, pp)
    if "precision" not in training.model_fields_set:
        return r
    s = realised_state(training.framework, training.precision, zero)
    if s is None:
        return r.model_copy(update={"mode": f"{r.mode}; training.precision is not settable: own bytes"})
    return with_precision(r, s)


@lru_cache(maxsize=1024)  # read for every layout's state: a profile's recipes are fixed
def _framework_recipe(framework: str, zero: int, pp: int) -> StateRecipe:
    """The framework's own recipe for a ZeRO stage at this PP (state_recipe)."""
    fw = load_framework(framework)
    exact = fw.recipe(zero, pp)
    return exact if exact is not None else next(r for r in fw.memory.recipes if r.zero_stage == zero)


def with_precision(r: StateRecipe, s: StateDtypes) -> StateRecipe:
    """The recipe with `s`'s bytes per parameter for weights, gradients and optimizer state,
    each split between its whole and sharded parts in the framework's proportions (which state
    the framework shards stays the framework's; what the run stores it in is set by the
    export's options, e.g. Megatron's --grad-reduce-in-bf16 gives 2-byte main gradients)."""

    def split(full: float, sharded: float, total: float) -> tuple[float, float]:
        have = full + sharded
        return (total, 0.0) if have == 0 else (full * total / have, sharded * total / have)

    wf, ws = split(r.weights_full_bytes, r.weights_sharded_bytes, s.weight_bytes)
    gf, gs = split(r.gradients_full_bytes, r.gradients_sharded_bytes, s.grad_bytes)
    of, os_ = split(r.optimizer_full_bytes, r.optimizer_sharded_bytes, s.optimizer_bytes)
    return r.model_copy(update={
        "mode": f"{r.mode}; training.precision's bytes by {' '.join(s.options) or 'default'}",
        "weights_full_bytes": wf,
        "weights_sharded_bytes": ws, "gradients_full_bytes": gf, "gradients_sharded_bytes": gs,
        "optimizer_full_bytes": of, "optimizer_sharded_bytes": os_})


def framework_state_bytes(training: TrainingSpec, local_params: float, *, pp: int, dp: int, cp: int,
                          zero: int) -> StateBytes:
    """Weights, gradients and optimizer state per GPU for `local_params` parameters on the
    rank (its TP x PP share), the sharded parts split over d = DP x CP ranks."""
    r, d = state_recipe(training, zero, pp), dp * cp
    return StateBytes(
        weights=local_params * (r.weights_full_bytes + r.weights_sharded_bytes / d),
        gradients=local_params * (r.gradients_full_bytes + r.gradients_sharded_bytes / d),
        optimizer=local_params * (r.optimizer_full_bytes + r.optimizer_sharded_bytes / d),
    )


def gathered_weight_bytes(training: TrainingSpec, params: ParameterCounts, *, tp: int, pp: int, zero: int) -> float:
    """Unsharded BF16 weights beyond the recipe's per-parameter bytes, bytes per GPU (each
    term a recipe field, cited in the framework's profile):
    - gathered_layers: transformer layers in flight (ZeRO-3 / FSDP prefetch);
    - head_unit_unsharded: the LM-head unit (final norm + LM head; with tied embeddings the
      embedding too), kept gathered from its forward to its backward (torchtitan's FSDP2
      default policy);
    - all_gather_pool: all-gather outputs cached on the all-gather stream, which only that
      stream reuses (PyTorch's caching allocator): the largest two consecutive units, the
      embedding or the LM-head unit plus one layer;
    - whole_parameter_prefetch: the largest single parameter on top of the gathered layers
      and the norms kept gathered (DeepSpeed ZeRO-3, whole_parameter_bytes).
    Everything is split over TP (the FSDP units hold the rank's TP shard)."""
    r = state_recipe(training, zero, pp)
    embedding = params.embedding + params.position_embedding
    # with tied embeddings (no separate LM head) torchtitan puts the embedding, final norm and
    # head in one unit, kept under the same policy (fsdp.py, enable_weight_tying)
    layer, head = params.per_layer, params.final_norm + (params.lm_head or embedding)
    units = r.gathered_layers * layer + (head if r.head_unit_unsharded else 0.0)
    if r.all_gather_pool:
        units += max(head, embedding) + layer
    if r.whole_parameter_prefetch:
        units += largest_parameter(params) + persistent_parameters(params)
    return units / tp * BF16_BYTES


def reduce_scatter_bytes(training: TrainingSpec, params: ParameterCounts, *, tp: int, pp: int) -> float | None:
    """FSDP2's reduce-scatter working set, bytes per GPU, where the framework's profile states
    memory.reduce_scatter_copy_bytes (torchtitan; None otherwise): the unit being reduced holds
    its unsharded gradient twice, the gradient and its copy in the reduce dtype (4: FP32 for
    torchtitan's mixed_precision_reduce), one unit at a time (torch _fsdp_collectives.py
    foreach_reduce, _fsdp_param_group.py post_backward; cited in the profile). Without PP the
    gradient beside the copy is the BF16 one autograd produced (2 bytes); with PP it is the FP32
    accumulated gradient the recipe already charges. The largest unit reduced while the layers'
    activations are held: a transformer block or the LM-head unit (final norm + LM head, the
    embedding when tied), split over TP."""
    copy = load_framework(training.framework).memory.reduce_scatter_copy_bytes
    if copy is None:
        return None
    head = params.final_norm + (params.lm_head or params.embedding + params.position_embedding)
    unit = max(params.per_layer, head) / tp
    return unit * (copy.value + (0 if pp > 1 else BF16_BYTES))


def largest_parameter(params: ParameterCounts) -> int:
    """Elements of the model's largest single parameter tensor: the embedding or LM head
    (V x h) or the learned position table; a layer's largest matrix is bounded by half its
    attention or FFN parameters (q or o of GQA/MHA, gate, up or down), never the largest
    in the models trainplan reads (V >= F)."""
    return max(params.embedding, params.lm_head, params.position_embedding,
               params.attention_per_layer // 2, params.ffn_per_layer // 2)


def persistent_parameters(params: ParameterCounts) -> int:
    """Elements of the norm weights (h or 2h per norm, under DeepSpeed's 1e5-element
    stage3_param_persistence_threshold for any h <= 1e5), which ZeRO-3 never partitions
    (deepspeedai/DeepSpeed edaa7221 deepspeed/runtime/zero/parameter_offload.py L311-329,
    mark_persistent_parameters; threshold default zero/config.py L221). Biases (also under
    the threshold) are not split out of the counts and are left out (h-sized, < 0.1 MB a
    layer)."""
    return params.layers * params.norms_per_layer + params.final_norm


def moe_gathered_delta_bytes(training: TrainingSpec, params: ParameterCounts, routed_per_layer: int, *, tp: int,
                             pp: int, zero: int, ep: int, etp: int) -> float:
    """What gathered_weight_bytes misses for a MoE model, bytes per GPU (negative when its
    dense-layer unit overstates the model's largest layer): FSDP units are transformer blocks,
    and a MoE block gathers its attention, norms, shared experts and router split over TP (the
    router is replicated over TP; hidden x E, at most a few MB, counted / tp) plus the rank's
    routed experts, / (ep x etp): with EP > 1 torchtitan fully_shards them over efsdp
    (pytorch/torchtitan b5bcd76c distributed/fsdp.py L267-348), so an all-gather returns the
    E / ep local experts; with EP 1 they are TP-sharded (models/common/MOE_SHARDING.md);
    Megatron-FSDP's units are TransformerLayer / MoETransformerLayer (NVIDIA/Megatron-LM
    d98e8a64 megatron/core/distributed/fsdp/mcore_fsdp_adapter.py L171), holding the rank's
    EP x ETP share of the experts. The
    largest block present (dense layers only where the model has them) replaces the dense one
    in each gathered unit (gathered_layers, plus one for the all-gather stream pool)."""
    r = state_recipe(training, zero, pp)
    units = r.gathered_layers + (1 if r.all_gather_pool else 0)
    if not units:
        return 0.0
    routed = routed_per_layer  # one MoE layer's routed experts (all E)
    moe_unit = (params.attention_per_layer + params.norms_per_layer + params.moe_ffn_per_layer - routed) / tp \
        + routed / (ep * etp)
    dense_unit = params.per_layer / tp
    largest = max(moe_unit, dense_unit if params.dense_layers else 0.0)
    return units * (largest - dense_unit) * BF16_BYTES


def moe_reduce_scatter_delta_bytes(training: TrainingSpec, params: ParameterCounts, routed_per_layer: int, *,
                                   tp: int, pp: int, ep: int, etp: int) -> float:
    """What reduce_scatter_bytes misses for a MoE model, bytes per GPU (never negative): the
    reduce-scatter copy is of the largest FSDP unit, and a MoE block (its attention, norms, router
    and shared experts / tp plus its E / (ep x etp) routed experts, the unit moe_gathered_delta_bytes
    gathers) can outgrow the dense block and the LM-head unit reduce_scatter_bytes sizes it by
    (Mixtral 8x7B at EP 1: 1.45e9 parameters against 2.2e8). 0 where the profile states no copy."""
    copy = load_framework(training.framework).memory.reduce_scatter_copy_bytes
    if copy is None:
        return 0.0
    head = params.final_norm + (params.lm_head or params.embedding + params.position_embedding)
    charged = max(params.per_layer, head) / tp
    moe_unit = (params.attention_per_layer + params.norms_per_layer + params.moe_ffn_per_layer
                - routed_per_layer) / tp + routed_per_layer / (ep * etp)
    per_param = copy.value + (0 if pp > 1 else BF16_BYTES)
    return max(0.0, moe_unit - charged) * per_param


def recipe_summary(training: TrainingSpec, zero: int, pp: int, dp: int, cp: int) -> dict:
    """What the plan prints beside a layout's memory: framework, mode, bytes per parameter."""
    r = state_recipe(training, zero, pp)
    return {"framework": training.framework, "zero_stage": zero, "mode": r.mode,
            "full_bytes_per_param": r.total_full_bytes, "sharded_bytes_per_param": r.total_sharded_bytes,
            "shard_ranks": dp * cp, "bytes_per_param": r.bytes_per_param(dp * cp)}


def per_layout_recipe_note(training: TrainingSpec) -> str:
    """The plan's statement of which recipe its memory figures use."""
    fw = load_framework(training.framework)
    return (f"this section uses the seed's capacity recipe (training.precision); every per-layout "
            f"memory figure uses {fw.name}'s recipe: {fw.memory.precision}")
