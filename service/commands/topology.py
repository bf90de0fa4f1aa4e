"""`trainplan topology`: the cluster graph's summary and what each group of a layout gets."""
from __future__ import annotations

import argparse
import dataclasses

from service.cli import emit
from service.commands import load_capped_cluster
from solver.presets import load_layout
from topology.groups import group_links
from topology.placement import parse_order, placement_stats
from topology.summary import graph_summary


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("topology", help="cluster graph summary and per-group bandwidth of a layout")
    p.add_argument("--cluster", required=True, help="cluster preset name or JSON path")
    p.add_argument("--layout", help="layout as a JSON path or an inline JSON object (tp, cp, dp, pp used)")
    p.add_argument("--order", default="tp-cp-dp-pp", help="rank order, fastest first (Megatron default)")
    p.add_argument("--format", choices=("json", "md"), default="json", help="output format")
    p.set_defaults(run=run)


def topology_report(cluster_arg, layout_arg=None, order: str = "tp-cp-dp-pp") -> dict:
    """The graph summary and, with a layout, its placement and GroupLinks (JSON-ready).

    Raises: SpecError, InfeasibleError.
    """
    cluster = load_capped_cluster(cluster_arg)
    out = {
        "cluster": cluster.name,
        "generator": cluster.topology.kind if cluster.topology else "flat",
        "gpus": cluster.gpus,
        "available_gpus": cluster.available_gpus,
        "unavailable_nodes": list(cluster.unavailable_nodes),
        "graph": graph_summary(cluster),
    }
    if layout_arg is None:
        return out
    lay = load_layout(layout_arg)
    o = parse_order(order)
    dims = {"tp": lay.tp, "cp": lay.cp, "dp": lay.dp, "pp": lay.pp}
    ranks, nodes_used, aligned = placement_stats(cluster, dims, o)
    out["layout"] = dims
    out["order"] = "-".join(o)
    out["placement"] = {"ranks": ranks, "nodes_used": nodes_used, "domain_aligned": aligned}
    links = group_links(cluster, lay.tp, lay.cp, lay.dp, lay.pp, order=o)
    out["groups"] = {k: dataclasses.asdict(v) for k, v in links.items()}
    return out


def render_md(r: dict) -> str:
    g = r["graph"]
    lines = [f"# Topology of {r['cluster']} ({r['generator']})", "",
             f"- GPUs: {r['gpus']} ({r['available_gpus']} available; down: {r['unavailable_nodes'] or 'none'})",
             f"- NVLink domains: {g['nvlink_domains']} of {', '.join(map(str, g['gpus_per_domain']))} GPUs",
             f"- Vertices: {', '.join(f'{n} {k}' for k, n in g['vertices'].items())}",
             f"- Links: {', '.join(f'{n} {k}' for k, n in g['links'].items())}",
             f"- Bisection bandwidth (rank-order halves): {g['bisection_gb_s']:,.0f} GB/s"]
    if "groups" in r:
        dims = " x ".join(f"{k.upper()}{n}" for k, n in r["layout"].items())
        pl = r["placement"]
        lines += ["", f"## Groups of {dims} (rank order {r['order']})", "",
                  f"{pl['ranks']} ranks on {pl['nodes_used']} nodes"
                  + (", whole groups per NVLink domain (some GPUs idle)" if pl["domain_aligned"] else ""), "",
                  "| group | size | stride | ring GB/s | latency us | leaves domain | per domain | all-to-all GB/s |",
                  "|---|---|---|---|---|---|---|---|"]
        for k, v in r["groups"].items():
            a2a = "-" if v["alltoall_bandwidth_gb_s"] is None else f"{v['alltoall_bandwidth_gb_s']:.1f}"
            lines.append(f"| {k} | {v['size']} | {v['stride']} | {v['bandwidth_gb_s']:.1f} | "
                         f"{v['latency_s'] * 1e6:.1f} | {v['crosses_nodes']} | {v['ranks_per_node']} | {a2a} |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    emit(topology_report(args.cluster, args.layout, args.order), args.format, render_md)
    return 0
