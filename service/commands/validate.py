"""`trainplan validate CASES.jsonl`: the cost model's predictions against measured runs.

Exit codes: 0 when every line was evaluated, 2 when the file cannot be read, holds no
cases, or any line is bad (the good lines are still reported; each bad line gets its own error).
"""
from __future__ import annotations

import argparse
import sys

from service.cli import add_format, emit
from service.commands.profile_args import add_profile_flag, profile_for
from solver.cost.validation import validate_lines
from solver.errors import Problem, SpecError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="predicted vs measured step time and peak memory per GPU for runs in the "
                         "calibration schema")
    p.add_argument("cases",
                   help="JSON-lines file of cases (schema of calibration/runs.jsonl); '-' reads stdin")
    add_profile_flag(p)
    add_format(p, "json")
    p.set_defaults(run=run)


def _read_lines(path: str) -> list[str]:
    if path == "-":
        return sys.stdin.read().splitlines()
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().splitlines()
    except OSError as exc:
        raise SpecError(f"cases: cannot read '{path}': {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SpecError(f"cases: '{path}' is not UTF-8 text") from None


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:+.1f}%"


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def _gb(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e9:.1f}"


def _memory_lines(memory: dict) -> list[str]:
    """The memory summary, one sentence (none without measured peaks)."""
    if not memory.get("measured_cases"):
        return []
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(memory["kinds"].items()))
    return [f"Peak memory per GPU, {memory['measured_cases']} measured ({kinds}): median |memory error| "
            f"{memory['median_abs_error'] * 100:.1f}%, max {memory['max_abs_error'] * 100:.1f}% "
            f"({memory['worst_case']}), mean signed {memory['mean_signed_error'] * 100:+.1f}%; largest "
            f"under-prediction {memory['max_under_prediction'] * 100:.1f}% (the fit margin these runs need)."]


def render_md(result: dict) -> str:
    """Markdown: one row per case, the summary, then any bad lines. GB = 1e9 bytes."""
    out = ["# Predicted vs measured step time and peak memory per GPU", "",
           "Memory in GB (1e9 bytes). `memory/GPU` is the whole predicted total; `pred. peak` is "
           "the prediction in the measurement's scope (allocator figures leave out the CUDA "
           "context and NCCL buffers). `fits` is the planning verdict (total within memory_gb x 1e9 "
           "less the 10% margin); `fits device` asks whether the prediction is consistent with a "
           "run that ran (total within the GPU's physical memory_gb GiB, no margin).", "",
           "| id | predicted s | measured s | error | fits | fits device | memory/GPU GB | pred. peak GB "
           "| meas. peak GB | memory error |",
           "|---|---:|---:|---:|:---:|:---:|---:|---:|---:|---:|"]
    for c in result["cases"]:
        out.append(f"| {c['id']} | {c['predicted_step_time_s']:.3f} | "
                   f"{_num(c['measured_step_time_s'], '.3f')} | {_pct(c['error'])} | "
                   f"{'yes' if c['fits'] else 'no'} | {'yes' if c['fits_device'] else 'no'} | "
                   f"{c['memory_per_gpu_bytes_total'] / 1e9:.1f} | "
                   f"{_gb(c['predicted_peak_memory_bytes'])} | {_gb(c['measured_peak_memory_bytes'])} | "
                   f"{_pct(c['memory_error'])} |")
    s = result["summary"]
    out += ["", f"Cases: {s['cases']}, with a measured step time: {s['measured_cases']}."]
    if s.get("measured_cases"):
        out.append(f"Median |error| {s['median_abs_error'] * 100:.1f}%, max |error| "
                   f"{s['max_abs_error'] * 100:.1f}% ({s['worst_case']}), mean signed error "
                   f"{s['mean_signed_error'] * 100:+.1f}%.")
    out.append(f"Fit: {s['fits']} of {s['cases']} within the planning capacity (10% margin); "
               f"{s['fits_device']} of {s['cases']} within the GPU's physical memory (no margin).")
    out += _memory_lines(s.get("memory", {}))
    for item, count in sorted(s.get("defaulted", {}).items()):
        out.append(f"{count} case(s) do not state {item.split('=')[0]} and were scored with "
                   f"{item.split('=', 1)[1]}.")
    if any(k.startswith("training.attention_kernel=flash") for k in s.get("defaulted", {})):
        out.append("Runs without FlashAttention (Megatron-LM / DeepSpeed before 2023) need "
                   "`training.attention_kernel: \"unfused\"`: scored as FlashAttention they come "
                   "out 10-30% too fast.")
    if result["errors"]:
        out += ["", "## Lines that could not be evaluated", ""]
        for e in result["errors"]:
            label = f"line {e['line']}" + (f" ({e['id']})" if e["id"] else "")
            out += [f"- {label}: {reason}" for reason in e["errors"]]
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    profile = profile_for(args)
    lines = _read_lines(args.cases)
    if not any(line.strip() for line in lines):
        where = "stdin" if args.cases == "-" else f"'{args.cases}'"
        reason = f"{where} holds no cases (empty or blank lines only); expected one JSON object per line"
        raise SpecError(f"cases: {reason}", [Problem("cases", reason)])
    result = (validate_lines(lines) if profile is None
              else validate_lines(lines, profile.options, profile.framework_options))
    emit(result, args.format, render_md)
    for e in result["errors"]:
        for reason in e["errors"]:
            print(f"error: line {e['line']}: {reason}", file=sys.stderr)
    return 2 if result["errors"] else 0
