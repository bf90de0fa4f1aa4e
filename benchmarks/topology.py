"""`trainplan topology` speed and peak memory at 512 to 100,000 GPUs (flat and rail-optimized
fat tree), each run as its own process so the peak RSS is that command's alone. Prints JSON.

`--with-graph` also times the exact path the command took before the closed forms (build the
networkx graph, max flow for the bisection, list every rank's slot): at 100,000 GPUs 72 s on an
idle 2-core machine, 260-380 s under load, and 1.4-1.5 GB, so it is off by default.

Run: `python -m benchmarks.topology [--with-graph] [--sizes 512,16384,100000]`. Not part of the
test gate. Wall time includes Python start-up and imports (about 1-2 s here).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from topology.catalog import PRESETS, strip_private

# The exact path of the command before the closed forms (graph.summary over the built graph,
# placement.place), run in a child process; argv: cluster JSON path, layout JSON.
_GRAPH_PATH = """
import json, sys
from topology.catalog import load_cluster
from topology.generators import build_graph
from topology.graph import summary
from topology.groups import group_links
from topology.placement import place
c = load_cluster(sys.argv[1]); lay = json.loads(sys.argv[2])
dims = {k: lay.get(k, 1) for k in ("tp", "cp", "dp", "pp")}
summary(build_graph(c)); p = place(c, dims); {s.node for s in p.slots}
group_links(c, dims["tp"], dims["cp"], dims["dp"], dims["pp"])
"""


def cluster_file(folder: Path, preset: str, gpus: int, nodes_per_leaf: int | None) -> Path:
    """The preset scaled to `gpus` GPUs (8 per node); fat trees get `nodes_per_leaf` (a divisor
    of the node count) so the leaves tile the nodes."""
    raw = strip_private(PRESETS.raw("clusters", preset))
    raw.update(name=f"{preset}-{gpus}", nodes=gpus // raw["gpus_per_node"])
    if nodes_per_leaf is not None:
        raw["topology"] = {**raw["topology"], "nodes_per_leaf": nodes_per_leaf}
    path = folder / f"{raw['name']}.json"
    path.write_text(json.dumps(raw))
    return path


def run_child(argv: list[str]) -> dict:
    """Wall seconds and peak RSS (MB, 1e6 bytes; Linux ru_maxrss is in KiB) of one child
    process, read from that child's own rusage (os.wait4)."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, "TRAINPLAN_MAX_CLUSTER_GPUS": "200000"})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            err.seek(0)
            raise SystemExit(f"{argv}: exit {proc.returncode}: {err.read().decode().strip()}")
    return {"wall_s": round(wall, 3), "peak_rss_mb": round(usage.ru_maxrss * 1024 / 1e6, 1)}


def layout_for(gpus: int) -> dict:
    """TP8 x PP4 x DP over the rest (the seed-style 3D layout)."""
    return {"tp": 8, "pp": 4, "dp": gpus // 32}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="512,16384,100000", help="GPU counts, comma-separated")
    ap.add_argument("--with-graph", action="store_true", help="also time the exact graph path")
    args = ap.parse_args()
    trainplan = str(Path(sys.executable).with_name("trainplan"))
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        for gpus in map(int, args.sizes.split(",")):
            nodes = gpus // 8
            for preset, npl in (("dgx-h100-superpod", None),
                                ("dgx-h100-superpod-rail-optimized", 32 if nodes % 32 == 0 else 25)):
                path = cluster_file(Path(tmp), preset, gpus, npl)
                layout = json.dumps(layout_for(gpus))
                row = {"cluster": preset, "gpus": gpus, "layout": layout_for(gpus),
                       "closed_form": run_child([trainplan, "topology", "--cluster", str(path),
                                                 "--layout", layout])}
                if args.with_graph:
                    row["graph"] = run_child([sys.executable, "-c", _GRAPH_PATH, str(path), layout])
                cases.append(row)
    print(json.dumps({"benchmark": "trainplan topology", "cases": cases}, indent=2))


if __name__ == "__main__":
    main()
