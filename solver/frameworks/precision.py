"""The model-state bytes a framework keeps when a training spec states `precision` explicitly:
the part of the stated recipe its exported configuration can set, the framework's own bytes
for the rest, and the options that set them. The per-layout memory (solver.cost.state) charges
these bytes and the exports write these options, so the memory predicted is the memory the
exported run keeps.

Megatron-LM (NVIDIA/Megatron-LM d98e8a64ddf34856e74b24714e3bedb2f5a39553):
- weights: --bf16 (2 bytes, with FP32 main parameters) or FP32 without it (4 bytes, no main
  copy) (megatron/training/arguments.py validate_args L1204-1217);
- main gradients: FP32 under --bf16 (validate_args sets accumulate_allreduce_grads_in_fp32
  unless --grad-reduce-in-bf16, L1213-1216); --grad-reduce-in-bf16 keeps them BF16 (2 bytes).
  Megatron-FSDP (ZeRO 2/3) keeps them in --megatron-fsdp-main-grads-dtype, default 'auto' (the
  BF16 gradient dtype), fp32 on request;
- Adam moments: FP32 unless --use-precision-aware-optimizer with --exp-avg-dtype /
  --exp-avg-sq-dtype bf16 | fp8 (megatron/core/optimizer/optimizer_config.py L187-207), which
  only the distributed optimizer runs (megatron/core/optimizer/__init__.py L1057): ZeRO >= 1
  (Megatron-FSDP sets the distributed optimizer itself, arguments.py L1124-1134);
- main parameters: FP32 under --bf16 whatever is stated. With the precision-aware optimizer
  Transformer Engine keeps only their 16-bit remainders (store_param_remainders,
  optimizer_config.py L192): 2 bytes where 4 are charged, an over-estimate on the safe side.
DeepSpeed (deepspeedai/DeepSpeed edaa7221267243c7be7fb49c5d5f5c4fb97b4641): under bf16 its ZeRO
optimizers keep FP32 master weights, FP32 master gradients and FP32 Adam moments (16 bytes,
the profile's recipe); bf16.bf16_master_weights_and_grads keeps the master weights and
gradients in BF16 (2 + 2) and bf16.bf16_optimizer_states the moments (2 + 2), both for ZeRO 1-3
only, the second only with the first (runtime/config.py L1041-1049, precision_config.py
L63-71). A stated recipe without FP32 master weights asks for the first, 2-byte moments then
for the second; FP32 master weights keep DeepSpeed's default.
torchtitan (pytorch/torchtitan b5bcd76c): FSDP2 keeps FP32 sharded parameters, gradients
(mixed_precision_reduce) and Adam moments; TrainingConfig has no field for the optimizer
state's dtypes: None (its own recipe).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Adam moment bytes -> Megatron --exp-avg-dtype / --exp-avg-sq-dtype choice (arguments.py)
MEGATRON_MOMENT_DTYPES = {2: "bf16", 1: "fp8"}


@dataclass(frozen=True)
class StateDtypes:
    """Bytes per parameter of weights, gradients and optimizer state (moments, master weights
    and any master gradients) the framework keeps, and the options of its export that give
    them: Megatron-LM arguments, or DeepSpeed `bf16` section keys."""

    weight_bytes: float
    grad_bytes: float
    optimizer_bytes: float
    options: tuple[str, ...] = ()


def realised_state(framework: str, p: Any, zero: int) -> StateDtypes | None:
    """What `framework` keeps at this ZeRO stage when asked for PrecisionRecipe `p`; None when
    its export sets no state dtype at this stage (its own recipe applies)."""
    if framework == "megatron-core":
        return megatron_state(p, zero)
    if framework == "deepspeed" and zero >= 1 and not p.master_weights:
        if p.optimizer_moment_bytes <= 2:
            return StateDtypes(2, 2, 2 + 2 + 2 * 2, ("bf16_master_weights_and_grads", "bf16_optimizer_states"))
        return StateDtypes(2, 2, 2 + 2 + 2 * 4, ("bf16_master_weights_and_grads",))
    return None


def megatron_state(p: Any, zero: int) -> StateDtypes:
    """What Megatron-LM keeps at this ZeRO stage when asked for `p`, and its arguments."""
    moments = p.optimizer_moment_bytes if zero >= 1 and p.optimizer_moment_bytes in MEGATRON_MOMENT_DTYPES else 4
    args: list[str] = []
    if moments != 4:
        dtype = MEGATRON_MOMENT_DTYPES[moments]
        args += ["--use-precision-aware-optimizer", "--exp-avg-dtype", dtype, "--exp-avg-sq-dtype", dtype]
    if p.weight_bytes == 4:  # FP32 training: no main copy, FP32 gradients
        return StateDtypes(4, 4, 2 * moments, tuple(args))
    grads = 2 if p.grad_bytes <= 2 else 4
    if zero < 2 and grads == 2:
        args.insert(0, "--grad-reduce-in-bf16")
    if zero >= 2 and grads == 4:
        args[:0] = ["--megatron-fsdp-main-grads-dtype", "fp32"]
    return StateDtypes(2, grads, 4 + 2 * moments, ("--bf16", *args))


def megatron_precision_args(t: Any, zero: int) -> list[str]:
    """--bf16 and the state-dtype options that give realised_state (only --bf16 when the
    training spec leaves `precision` to Megatron's own recipe)."""
    if "precision" not in t.model_fields_set:
        return ["--bf16"] if t.precision.weight_bytes == 2 else []
    return list(megatron_state(t.precision, zero).options)


def deepspeed_bf16_section(t: Any, zero: int) -> dict[str, bool]:
    """The DeepSpeed config's `bf16` section: enabled (the BF16 recipe charged), plus the
    master-weight / optimizer-state dtype keys realised_state asks for."""
    s = realised_state("deepspeed", t.precision, zero) if "precision" in t.model_fields_set else None
    return {"enabled": True, **dict.fromkeys(s.options if s else (), True)}
