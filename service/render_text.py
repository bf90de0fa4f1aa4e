"""Words and units the Markdown, HTML and CLI-text renderers share, so every output says the
same thing the same way: memory in GB (1e9 bytes) with the GPU's capacity also in GiB (2^30
bytes), MFU under both attention-FLOP conventions with the one in use named, layouts with
every field labelled. Formatting only: no arithmetic beyond unit conversion.
"""
from __future__ import annotations

from typing import Any

GB_BYTES = 1e9
GIB_BYTES = 2**30
GB_NOTE = "GB = 1e9 bytes, GiB = 2^30 bytes"
# Where each capacity figure comes from (topology.spec.GpuSpec.memory_bytes and
# solver.cost.validation.device_capacity_bytes): the planner's fits verdict is on the decimal
# figure; HBM parts sold as "80 GB" physically carry 80 GiB, which only validate's
# fits_device uses.
CAPACITY_BASIS = ("capacity is the GPU's memory_gb x 1e9 bytes (the planning basis; fits = total "
                  "within it less the margin); an HBM GPU sold as \"80 GB\" physically has 80 GiB "
                  "(85.9 GB), used only by validate's fits_device")


def gb(x: float | None, digits: int = 1) -> str:
    """'69.0 GB' (1e9 bytes), or 'n/a'."""
    return "n/a" if x is None else f"{x / GB_BYTES:,.{digits}f} GB"


def capacity_text(capacity_bytes: float) -> str:
    """A GPU's memory in GB and GiB: '80 GB (74.5 GiB)'."""
    return f"{capacity_bytes / GB_BYTES:,.4g} GB ({capacity_bytes / GIB_BYTES:,.1f} GiB)"


# ---- MFU -------------------------------------------------------------------------------
# DESIGN.md's model FLOPs count attention as 12 S T (H dh) L (non-causal); a causal mask
# halves that term. solver.cost.estimate.LayoutEstimate.mfu_fields carries both figures.
CONVENTIONS = ("non-causal", "causal")
MFU_HEAD = ["MFU, non-causal attention FLOPs", "MFU, causal attention FLOPs"]


def mfu_by_convention(d: dict[str, Any], key: str = "mfu") -> dict[str, float | None]:
    """{'non-causal': ..., 'causal': ...} of a result dict; a dict from before both were
    reported (a stored plan) gives its `mfu` under its convention and None for the other."""
    conv = d.get("mfu_attention_convention") or "non-causal"
    out: dict[str, float | None] = {}
    for c in CONVENTIONS:
        field = f"{key}_{c.replace('-', '')}"
        out[c] = d.get(field, d.get(key) if c == conv else None)
    return out


def pct(x: float | None, fmt: str = ".1%") -> str:
    return "-" if x is None else format(x, fmt)


def mfu_text(d: dict[str, Any], key: str = "mfu", extra: str = "") -> str:
    """'55.6% (non-causal attention FLOPs; causal 51.9%)': the MFU in use, its convention, the
    other; `extra` is appended inside the parentheses ('; ' + extra)."""
    conv = d.get("mfu_attention_convention") or "non-causal"
    other = "causal" if conv == "non-causal" else "non-causal"
    value = mfu_by_convention(d, key)[other]
    rest = ("" if value is None else f"; {other} {value:.1%}") + (f"; {extra}" if extra else "")
    return f"{pct(d.get(key))} ({conv} attention FLOPs{rest})"


def mfu_cells(d: dict[str, Any], key: str = "mfu") -> list[str]:
    """Table cells under MFU_HEAD."""
    both = mfu_by_convention(d, key)
    return [pct(both[c]) for c in CONVENTIONS]


# ---- layouts ---------------------------------------------------------------------------
DEFAULT_RANK_ORDER = "tp-cp-dp-pp"


def _known(d: dict[str, Any]) -> list[str]:
    parts = [f"TP {d['tp']}", f"PP {d['pp']}"]
    parts += [f"VPP {d['vpp']}"] if d.get("vpp", 1) > 1 else []
    parts += [f"DP {d['dp']}"]
    parts += [f"CP {d['cp']}"] if d.get("cp", 1) > 1 else []
    parts += [f"EP {d['ep']}"] if (d.get("ep") or 1) > 1 else []
    parts += [f"expert TP {d['etp']}"] if d.get("etp") not in (None, d["tp"]) else []
    parts += [f"ZeRO-{d['zero_stage']}"] if d.get("zero_stage") is not None else []
    parts += ["sequence parallel"] if d.get("sequence_parallel") else []
    parts += [f"micro-batch {d['micro_batch']}"] if d.get("micro_batch") is not None else []
    parts += [f"recompute {d['recompute']}"] if d.get("recompute") else []
    if d.get("rank_order") not in (None, DEFAULT_RANK_ORDER):
        parts.append(f"rank order {d['rank_order']}")
    if d.get("pipeline_layers"):
        parts.append("layers per stage " + "/".join(str(n) for n in d["pipeline_layers"]))
    return parts


LABELLED = {"tp", "pp", "vpp", "dp", "cp", "ep", "etp", "zero_stage", "sequence_parallel",
            "micro_batch", "recompute", "rank_order", "pipeline_layers"}


def _unlabelled(d: dict[str, Any]) -> list[str]:
    """LayoutSpec fields added after these labels were written, shown when not at their default."""
    from solver.specs import LayoutSpec

    out = []
    for name, f in LayoutSpec.model_fields.items():
        if name not in LABELLED and name in d and d[name] != f.default:
            out.append(f"{name.replace('_', ' ')} {d[name]}")
    return out


def layout_words(d: dict[str, Any], framework: bool = True) -> str:
    """'TP 8 · PP 1 · DP 64 · ZeRO-2 · sequence parallel · micro-batch 1 · recompute selective
    [megatron-core]': every layout field labelled; degrees of 1 beyond TP/PP/DP left out."""
    text = " · ".join(_known(d) + _unlabelled(d))
    return text + (f" [{d['framework']}]" if framework and d.get("framework") else "")


def yes_no(x: Any) -> str:
    return "-" if x is None else ("yes" if x else "no")
