"""The constraint families of the layout space, one function each (shared by CP-SAT and the oracle).

Each family is a plain predicate over a few layout fields, so the CP-SAT model (which
turns them into allowed-tuple tables over only those fields) and the exhaustive
evaluator (which filters full layouts) apply the same rules. Sources:
- tensor: attention heads and key/value heads are split across TP ranks (Shoeybi et al.
  2019, sec. 3; GQA kv heads are replicated when TP > kv_heads, Megatron-LM
  `num_query_groups`); TP stays inside the NVLink domain (Narayanan et al. 2021, sec. 3.3).
- pipeline: pp x vpp model chunks, each >= 1 layer; interleaving needs equal chunks and a
  micro-batch count that is a multiple of pp (Narayanan et al. 2021, sec. 2.2.2; Megatron-LM
  schedules.py). Uneven splits (Llama 3 first/last stages lighter, Dubey et al. 2024,
  sec. 3.3.2) only without interleaving.
- context: the sequence is cut into 2 x cp chunks for causal load balance (Megatron-LM
  context parallelism; Liu et al. 2023 ring attention).
- gpus: tp x pp x dp x cp is the number of GPUs used.
- batch: global batch = dp x micro_batch x accumulation x seq_len (seed plan, "Build the
  global batch"); accumulation as in solver.cost.accounting.batch_plan.
- experts (MoE models): EP divides the routed experts (Megatron-LM arguments.py, num_experts
  % EP == 0); the expert group EP x ETP x expert-DP folds onto the TP x CP x DP ranks of a
  pipeline stage (Megatron-Core parallel_state.py initialize_model_parallel), so EP x ETP
  divides them; ETP splits each expert's FFN width (it must divide expert_ffn_hidden) and,
  like TP, stays inside the NVLink domain. A dense model has ep 1 and etp DENSE_ETP (unset).
- framework: what training.framework can run (solver.frameworks.capability, each rule cited
  in solver/data/frameworks/<name>.json): ZeRO stages with and without PP, interleaving and
  its micro-batch rule, CP only with the attention kernels its CP supports, TP and SP; the
  degrees a model part limits in that framework (solver.frameworks.models.model_degrees_ok:
  torchtitan's multi-token prediction only at pp 1 and cp 1).
"""
from __future__ import annotations

from solver.cost.accounting import batch_plan
from solver.cost.moe_comm import moe_overlap_problems
from solver.frameworks import capability as fwcap
from solver.frameworks import load_framework
from solver.frameworks.models import model_degrees_ok
from solver.search import moe_split
from solver.search.options import SearchOptions
from solver.specs import ModelSpec, TrainingSpec, tp_splits_heads
from topology.spec import ClusterSpec


def tensor_ok(model: ModelSpec, cluster: ClusterSpec, options: SearchOptions, tp: int) -> bool:
    """TP divides the query heads; it divides kv_heads or is a multiple of them; in one node."""
    if not tp_splits_heads(model, tp):
        return False
    if options.allow_tp_outside_node:
        return True
    return tp <= cluster.gpus_per_node and cluster.gpus_per_node % tp == 0


# etp of a dense model in the search's integer rows and tables: LayoutSpec.etp None.
DENSE_ETP = 0


def expert_ok(model: ModelSpec, cluster: ClusterSpec, options: SearchOptions, tp: int, cp: int, dp: int,
              ep: int, etp: int) -> bool:
    """The expert degrees (see module docstring); a dense model only as ep 1, etp DENSE_ETP."""
    moe = model.moe
    if moe is None:
        return ep == 1 and etp == DENSE_ETP
    if etp < 1 or moe.experts % ep or (tp * cp * dp) % (ep * etp) or moe.expert_ffn_hidden % etp:
        return False
    return options.allow_tp_outside_node or (etp <= cluster.gpus_per_node and cluster.gpus_per_node % etp == 0)


def framework_expert_ok(training: TrainingSpec, tp: int, pp: int, cp: int, sp: bool, ep: int, etp: int) -> bool:
    """The framework runs these expert degrees with this TP, PP, CP and SP (always true for a
    dense model, etp DENSE_ETP)."""
    if etp == DENSE_ETP:
        return True
    return fwcap.expert_ok(load_framework(training.framework), tp=tp, pp=pp, cp=cp, sp=sp, ep=ep, etp=etp)


def moe_overlap_ok(training: TrainingSpec, pp: int, vpp: int, ep: int, etp: int, recompute: str) -> bool:
    """training.moe_a2a_overlap is Megatron's --overlap-moe-expert-parallel-comm, which Megatron
    accepts only where moe_overlap_problems finds nothing. Always true for a dense model or
    without the overlap."""
    if etp == DENSE_ETP or not training.moe_a2a_overlap:
        return True
    return not moe_overlap_problems(pp, vpp, ep, recompute)


def framework_expert_shard_ok(training: TrainingSpec, tp: int, cp: int, dp: int, zero: int, ep: int,
                              etp: int) -> bool:
    """The framework runs a MoE model at this ZeRO stage with EP x ETP on its expert ranks
    (always true for a dense model)."""
    if etp == DENSE_ETP:
        return True
    return fwcap.expert_shard_ok(load_framework(training.framework), tp=tp, cp=cp, dp=dp, zero=zero,
                                 ep=ep, etp=etp)


def sequence_parallel_ok(tp: int, sp: bool) -> bool:
    """Sequence parallelism splits norms/dropout over the TP group, so it needs tp > 1."""
    return tp > 1 or not sp


def pipeline_ok(model: ModelSpec, options: SearchOptions, pp: int, vpp: int,
                training: TrainingSpec | None = None) -> bool:
    """pp x vpp chunks of >= 1 layer; interleaving needs vpp | layers/pp; uneven only if allowed
    (a MoE model: only as first/last stage counts its framework writes, solver.search.moe_split)."""
    chunks = pp * vpp
    if vpp > 1 and pp == 1:
        return False
    if training is not None and not model_degrees_ok(training.framework, model, pp=pp):
        return False  # e.g. torchtitan's MTP runs at pp 1 only (solver.frameworks.models)
    if chunks > model.layers:
        return False
    if model.layers % chunks == 0:
        return True
    # An uneven split is exported as explicit pipeline_layers (Megatron refuses layers % pp, arguments.py
    # validate_args). A MoE model's is a first/last split (--decoder-first/last-pipeline-num-layers)
    # costed per stage (solver.cost.moe_stages), where its framework writes one (moe_split.applies).
    if model.moe is not None:
        return moe_split.applies(model, training, moe_split.allowed(options), pp, vpp)
    return vpp == 1 and options.allow_uneven_pipeline


def interleave_batch_ok(pp: int, vpp: int, accum: int, training: TrainingSpec | None = None) -> bool:
    """Interleaved 1F1B runs micro-batches in groups of pp (Megatron-LM schedules.py); with
    a training spec, its framework's rule (solver.frameworks.capability.interleave_batch_ok)."""
    if training is None:
        return vpp == 1 or accum % pp == 0
    return fwcap.interleave_batch_ok(load_framework(training.framework), pp, vpp, accum)


def framework_tensor_ok(training: TrainingSpec, tp: int, sp: bool) -> bool:
    """The framework has TP (when tp > 1) and Megatron-style SP (when sp)."""
    return fwcap.tensor_ok(load_framework(training.framework), tp, sp)


def framework_pipeline_ok(training: TrainingSpec, pp: int, vpp: int) -> bool:
    """The framework interleaves (when vpp > 1) at this pp."""
    return fwcap.interleave_ok(load_framework(training.framework), pp, vpp)


def framework_context_ok(training: TrainingSpec, cp: int, model: ModelSpec | None = None) -> bool:
    """The framework's CP runs with the training's attention kernel (when cp > 1), and with
    `model` at this CP (torchtitan's MTP: cp 1 only, solver.frameworks.models)."""
    if model is not None and not model_degrees_ok(training.framework, model, cp=cp):
        return False
    return fwcap.context_ok(load_framework(training.framework), training.attention_kernel, cp)


def framework_shard_ok(training: TrainingSpec, tp: int, pp: int, cp: int, zero: int) -> bool:
    """The framework runs this ZeRO stage at this PP (and with this TP and CP)."""
    return fwcap.shard_ok(load_framework(training.framework), tp, pp, cp, zero)


def context_ok(training: TrainingSpec, cp: int) -> bool:
    """CP > 1 cuts each sequence into 2 x cp equal chunks (causal load balancing)."""
    return cp == 1 or training.seq_len % (2 * cp) == 0


def gpu_target(cluster: ClusterSpec, options: SearchOptions) -> int:
    """GPUs a layout must use (options.gpus, capped at the available GPUs; default all)."""
    available = cluster.available_gpus
    return available if options.gpus is None else min(options.gpus, available)


def gpus_ok(cluster: ClusterSpec, options: SearchOptions, gpus: int) -> bool:
    """The target GPU count is used, or at most that many when the GPU count may vary."""
    target = gpu_target(cluster, options)
    return gpus <= target if options.gpus_may_vary else gpus == target


def accumulation(training: TrainingSpec, dp: int, micro_batch: int) -> int:
    """Micro-batches per step per replica (nearest to the target, at least 1)."""
    return batch_plan(training, dp, micro_batch).grad_accum


def micro_batch_limit(training: TrainingSpec, options: SearchOptions, dp: int) -> int:
    """Largest micro-batch batch_ok can accept with `dp` replicas (at least 1): one pass of
    dp x micro_batch sequences may not exceed the target batch plus its tolerance, since the
    accumulation is at least 1."""
    top = training.global_batch_tokens * (1 + options.batch_tolerance)
    return max(1, int(top // (dp * training.seq_len)))


def batch_ok(training: TrainingSpec, options: SearchOptions, dp: int, micro_batch: int) -> bool:
    """Tokens per step hit the target exactly, or within the relative batch tolerance."""
    tokens = batch_plan(training, dp, micro_batch).tokens_per_step
    miss = abs(tokens - training.global_batch_tokens)
    return miss <= options.batch_tolerance * training.global_batch_tokens


def pipeline_split(layers: int, pp: int, vpp: int) -> tuple[int, ...]:
    """Transformer layers per pipeline stage (rank), as the cost model assumes them.

    The cost model charges the busiest rank ceil(L / (pp vpp)) x vpp layers
    (solver.cost.terms.layers_on_rank). With an uneven split the missing layers are taken
    from the two ends alternately, last stage first (it also runs the LM head and loss),
    then the first (it runs the embedding), as in Llama 3 (Dubey et al. 2024, sec. 3.3.2).
    Interleaved schedules split evenly (pipeline_ok requires it).
    """
    per = -(-layers // (pp * vpp)) * vpp
    split = [per] * pp
    deficit, ends = per * pp - layers, []
    for k in range(pp // 2 + 1):
        ends += [pp - 1 - k, k] if pp - 1 - k != k else [k]
    while deficit > 0:
        moved = False
        for s in ends:
            if deficit and split[s] > 1:
                split[s] -= 1
                deficit -= 1
                moved = True
        if not moved:
            break
    return tuple(split)
