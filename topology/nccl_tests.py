"""nccl-tests output -> the cluster's measured busbw (`trainplan cluster from-nccl-tests`).

Reads the text `all_reduce_perf` prints (NVIDIA/nccl-tests a0b82b22, src/util.cu:
writeDeviceReport, writeResultHeader, writeBenchmarkLine*, writeResultFooter; older releases
differ in columns, so columns are found by the header's names):

    #  Rank  0 Group  0 Pid 204751 on dgx-h100-001 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
    #  size  count  type  redop  root  time  algbw  busbw  #wrong  time  algbw  busbw  #wrong
    536870912  134217728  float  sum  -1  2618.18  205.06  358.85  0  2638.94  203.44  356.02  0

Units: nccl-tests' GB/s are 1e9 bytes/s (all_reduce.cu AllReduceGetBw: bytes / 1.0E9 / sec), the same GB
as trainplan's `_gb_s`. busbw = algbw x 2(n-1)/n for all-reduce (doc/PERFORMANCE.md), the
figure the cluster's `intra_node` / `inter_node.bandwidth_gb_s` hold.

The plateau is the median busbw, out-of-place and in-place, of the rows whose message is at
least 1/16 of the largest (with `-f 2`, the five largest sizes): large messages, where busbw
stops growing, without letting one noisy row decide.
A run whose ranks sit on one host measures the in-node link; ranks on several hosts measure
the cross-node link, and its busbw is divided by the ranks per host: with a ring all-reduce
each node's NICs carry all of its ranks' rings, busbw = (NICs x NIC bandwidth), so the
per-GPU share is busbw / ranks per host (a run with one rank per host needs no division).
Raises SpecError (exit 2 on the CLI) naming the file, the line and the reason.
"""
from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from topology.errors import Problem, SpecError
from topology.spec import ClusterSpec, parse_spec

PLATEAU_FRACTION = 16  # rows with size >= largest / 16 form the plateau (see module doc)
SMALL_PLATEAU_BYTES = 64 * 2**20  # a largest message under 64 MiB may not reach the plateau
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+"
                   r"\[[^\]]*\]\s*(.*)$")
_COLLECTIVE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")


@dataclass(frozen=True)
class NcclRun:
    """One nccl-tests output file, summarised."""

    path: str
    kind: Literal["intra_node", "inter_node"]
    ranks: int
    hosts: int
    ranks_per_host: int
    device: str
    largest_bytes: int
    plateau_sizes_bytes: tuple[int, ...]
    busbw_gb_s: float  # plateau busbw as printed
    per_gpu_gb_s: float  # the cluster field's value: busbw, or busbw / ranks_per_host across hosts
    warnings: tuple[str, ...]


def _fail(path: str, reason: str, line: int | None = None) -> SpecError:
    where = f"{path}:{line}" if line else path
    return SpecError(f"{where}: {reason}", [Problem(where, reason)])


def read_run(path: str) -> NcclRun:
    """Parse one all_reduce_perf output file. Raises: SpecError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise _fail(path, "not UTF-8 text (expected nccl-tests output)") from None
    except OSError as exc:
        raise _fail(path, f"cannot read: {exc.strerror}") from None
    lines = text.splitlines()
    warnings = _check_collective(path, lines)
    rows = _rows(path, lines)
    hosts = _rank_hosts(path, lines)
    largest = max(size for size, _ in rows)
    plateau = [(size, bws) for size, bws in rows if size * PLATEAU_FRACTION >= largest]
    busbw = statistics.median([b for _, bws in plateau for b in bws])
    if largest < SMALL_PLATEAU_BYTES:
        warnings.append(f"{path}: largest message {largest:,} bytes; busbw may not have reached its "
                        "plateau (run with -e 1G or more)")
    per_host = Counter(hosts.values())
    if len(set(per_host.values())) > 1:
        raise _fail(path, f"uneven ranks per host {dict(per_host)}: cannot give a per-GPU figure")
    ranks_per_host = next(iter(per_host.values()))
    kind: Literal["intra_node", "inter_node"] = "intra_node" if len(per_host) == 1 else "inter_node"
    return NcclRun(path, kind, len(hosts), len(per_host), ranks_per_host, _device(lines), largest,
                   tuple(size for size, _ in plateau), busbw,
                   busbw if kind == "intra_node" else busbw / ranks_per_host, tuple(warnings))


def _check_collective(path: str, lines: list[str]) -> list[str]:
    """all_reduce_perf only: other collectives' busbw means other traffic. Old releases do
    not print the test name: accepted with a warning."""
    for line in lines:
        m = _COLLECTIVE.match(line)
        if m:
            if m.group(1) != "all_reduce_perf":
                raise _fail(path, f"is {m.group(1)} output; the cluster's busbw fields come from all_reduce_perf")
            return []
    return [f"{path}: no '# Collective test starting' line; taken as all_reduce_perf"]


def _rank_hosts(path: str, lines: list[str]) -> dict[int, str]:
    """Rank -> host from the '#  Rank N ... on HOST device ...' lines."""
    hosts = {}
    for line in lines:
        m = _RANK.match(line)
        if m:
            hosts[int(m.group(1))] = m.group(2)
    if not hosts:
        raise _fail(path, "no '#  Rank N ... on HOST device D' lines: cannot tell an in-node run from a "
                          "cross-node one (keep the header nccl-tests prints)")
    return hosts


def _device(lines: list[str]) -> str:
    for line in lines:
        m = _RANK.match(line)
        if m:
            return m.group(3).strip()
    return ""


def _columns(path: str, lines: list[str]) -> tuple[int, list[int], list[int], int]:
    """(header line number, busbw column indices, #wrong column indices, column count)."""
    for no, line in enumerate(lines, 1):
        names = line.lstrip("#").split()
        if line.startswith("#") and "size" in names and "busbw" in names:
            busbw = [i for i, n in enumerate(names) if n == "busbw"]
            wrong = [i for i, n in enumerate(names) if n == "#wrong"]
            return no, busbw, wrong, max(busbw + wrong) + 1
    raise _fail(path, "no column header ('#  size  count  type ... busbw ...'): not nccl-tests output")


def _rows(path: str, lines: list[str]) -> list[tuple[int, list[float]]]:
    """(size in bytes, busbw values) of every result row after the column header."""
    start, busbw, wrong, width = _columns(path, lines)
    rows = []
    for no, line in enumerate(lines[start:], start + 1):
        cells = line.split()
        if not cells or line.startswith("#"):
            _check_footer(path, line, no)
            continue
        if not cells[0].isdigit():
            continue  # NCCL_DEBUG log lines interleaved with the results
        if len(cells) < width:
            raise _fail(path, f"{len(cells)} columns; the header names {width} up to busbw", no)
        rows.append((int(cells[0]), [_number(path, cells[i], no) for i in busbw]))
        bad = [cells[i] for i in wrong if cells[i] not in ("0", "N/A")]
        if bad:
            raise _fail(path, f"#wrong = {bad[0]}: the run reported wrong results", no)
    if not rows:
        raise _fail(path, "no result rows after the column header")
    return rows


def _number(path: str, cell: str, no: int) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise _fail(path, f"busbw '{cell}' is not a number", no) from None
    if not math.isfinite(value) or value < 0:
        raise _fail(path, f"busbw '{cell}' is not a finite non-negative number", no)
    return value


def _check_footer(path: str, line: str, no: int) -> None:
    if line.startswith("# Out of bounds values") and "FAILED" in line:
        raise _fail(path, "nccl-tests reported out-of-bounds values (FAILED)", no)


def measured_cluster(base: ClusterSpec, runs: list[NcclRun], name: str | None = None) -> dict:
    """The base cluster (nodes, GPU, latencies, topology kept) with `intra_node` and/or
    `inter_node.bandwidth_gb_s` set from the runs, as a JSON-ready cluster object whose
    `_source`, `_assumed` and `_measured` keys (dropped when it is loaded) say where each
    figure came from. Of several runs of one kind the one with the most ranks is used.

    Raises: SpecError (a figure the cluster spec refuses).
    """
    out = base.model_dump(mode="json", exclude_defaults=False)
    out["name"] = name or f"{base.name}-measured"
    chosen = {}
    for kind in ("intra_node", "inter_node"):
        of_kind = [r for r in runs if r.kind == kind]
        if of_kind:
            chosen[kind] = max(of_kind, key=lambda r: (r.ranks, -r.per_gpu_gb_s))
            out[kind]["bandwidth_gb_s"] = round(chosen[kind].per_gpu_gb_s, 2)
    parse_spec(ClusterSpec, {k: v for k, v in out.items() if not k.startswith("_")}, "cluster")
    source = [f"{k}.bandwidth_gb_s from {r.path}: all_reduce_perf on {r.ranks} ranks over {r.hosts} "
              f"host(s), busbw plateau {r.busbw_gb_s:.2f} GB/s" for k, r in chosen.items()]
    return {"_source": "nccl-tests all_reduce_perf; " + "; ".join(source) + f"; the rest from {base.name}",
            "_assumed": _assumptions(chosen), "_measured": [_run_dict(r) for r in runs], **out}


def _assumptions(chosen: dict[str, NcclRun]) -> list[str]:
    out = [f"plateau = median busbw (out-of-place and in-place) of rows >= 1/{PLATEAU_FRACTION} of "
           "the largest message"]
    inter = chosen.get("inter_node")
    if inter is not None and inter.ranks_per_host > 1:
        out.append(f"inter_node = busbw {inter.busbw_gb_s:.2f} / {inter.ranks_per_host} ranks per host: a ring "
                   "all-reduce's cross-node traffic shares each node's NICs (NCCL tree, NVLS or SHARP "
                   "runs report higher busbw; NCCL_ALGO=Ring or one rank per host measures the link itself)")
    return out


def _run_dict(r: NcclRun) -> dict:
    return {"file": r.path, "kind": r.kind, "ranks": r.ranks, "hosts": r.hosts,
            "ranks_per_host": r.ranks_per_host, "device": r.device, "largest_bytes": r.largest_bytes,
            "plateau_sizes_bytes": list(r.plateau_sizes_bytes), "busbw_gb_s": r.busbw_gb_s,
            "per_gpu_gb_s": r.per_gpu_gb_s}


def run_warnings(base: ClusterSpec, runs: list[NcclRun]) -> list[str]:
    """What the user should know about how the runs map onto the base cluster."""
    out = [w for r in runs for w in r.warnings]
    for r in runs:
        if r.kind == "intra_node" and r.ranks != base.gpus_per_node:
            out.append(f"{r.path}: in-node run on {r.ranks} GPUs; {base.name} has {base.gpus_per_node} per node")
    t = base.topology
    crosses = any(r.kind == "inter_node" for r in runs)
    if t is not None and t.kind in ("fat_tree", "rail_optimized", "graph") and crosses:
        out.append(f"{base.name}'s {t.kind} topology takes its network figures from `topology`, not "
                   "inter_node: edit them there too")
    return out
