"""`trainplan cluster from-nccl-tests`: a cluster description from measured all-reduce busbw."""
from __future__ import annotations

import argparse
import json
import sys

from service.cli import emit
from topology.catalog import load_cluster
from topology.nccl_tests import measured_cluster, read_run, run_warnings


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("cluster", help="build a cluster description from measurements")
    sub = p.add_subparsers(dest="cluster_command", required=True)
    q = sub.add_parser(
        "from-nccl-tests",
        help="set a cluster's busbw fields from nccl-tests all_reduce_perf output",
        description="Reads nccl-tests all_reduce_perf output files: a run on one host sets "
                    "intra_node.bandwidth_gb_s, a run over several hosts inter_node.bandwidth_gb_s "
                    "(busbw / ranks per host). The busbw is the large-message plateau. Prints the "
                    "base cluster with those figures as JSON; malformed files exit 2.")
    q.add_argument("files", nargs="+", help="all_reduce_perf output files (in-node and/or cross-node runs)")
    q.add_argument("--base", required=True,
                   help="cluster preset name, JSON path or inline JSON whose nodes, GPU, latencies "
                        "and topology are kept")
    q.add_argument("--name", help="name of the new cluster (default: <base>-measured)")
    q.add_argument("--format", choices=("json", "md"), default="json",
                   help="output format (default json: the cluster object, loadable by --cluster)")
    q.set_defaults(run=run)


def render_md(c: dict) -> str:
    lines = [f"# Cluster {c['name']} from nccl-tests", "",
             f"- intra_node: {c['intra_node']['bandwidth_gb_s']:g} GB/s busbw per GPU (GB = 1e9 bytes)",
             f"- inter_node: {c['inter_node']['bandwidth_gb_s']:g} GB/s busbw per GPU", "",
             "| file | link | ranks | hosts | plateau busbw GB/s | per GPU GB/s |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['file']} | {r['kind']} | {r['ranks']} | {r['hosts']} | {r['busbw_gb_s']:.2f} | "
              f"{r['per_gpu_gb_s']:.2f} |" for r in c["_measured"]]
    lines += ["", "```json", json.dumps({k: v for k, v in c.items() if k != "_measured"}, indent=2), "```"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    base = load_cluster(args.base)
    runs = [read_run(path) for path in args.files]
    cluster = measured_cluster(base, runs, args.name)
    for warning in run_warnings(base, runs):
        print(f"warning: {warning}", file=sys.stderr)
    emit(cluster, args.format, render_md)
    return 0
