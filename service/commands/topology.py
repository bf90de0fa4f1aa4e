"""`trainplan topology`: the cluster graph's summary and what each group of a layout gets."""
from __future__ import annotations

import argparse
import dataclasses
from typing import get_args

from service.cli import add_format, emit
from service.commands import load_capped_cluster
from solver.errors import Problem, SpecError
from solver.presets import load_layout
from solver.specs import DEFAULT_RANK_ORDER, RankOrder
from topology.groups import group_links
from topology.placement import parse_order, placement_stats
from topology.progress import note
from topology.summary import graph_summary


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("topology", help="cluster graph summary and per-group bandwidth of a layout")
    p.add_argument("--cluster", required=True, help="cluster preset name, JSON path or inline JSON object")
    p.add_argument("--layout", help="layout as a JSON path or an inline JSON object (tp, cp, dp, pp used)")
    p.add_argument("--order", default=None, metavar="ORDER",
                   help=f"rank order, fastest-varying first: {' or '.join(RANK_ORDERS)} (the orders a "
                        "layout's rank_order accepts; default: the layout's rank_order, else "
                        f"{DEFAULT_RANK_ORDER}, Megatron-LM's default)")
    add_format(p, "json")
    p.set_defaults(run=run)


RANK_ORDERS: tuple[str, ...] = get_args(RankOrder)


def check_order(order: str | None) -> None:
    """Refuse an order a layout's rank_order would refuse. Raises: SpecError."""
    if order is not None and order not in RANK_ORDERS:
        reason = f"'{order}' is not a rank order; accepted: {', '.join(RANK_ORDERS)}"
        raise SpecError(f"order: {reason}", [Problem("order", reason)])


def topology_report(cluster_arg, layout_arg=None, order: str | None = None) -> dict:
    """The graph summary and, with a layout, its placement and GroupLinks (JSON-ready).

    `order`: one of RANK_ORDERS; None takes the layout's rank_order.
    Raises: SpecError, InfeasibleError.
    """
    check_order(order)
    cluster = load_capped_cluster(cluster_arg)
    note("building the %s-GPU graph of %s", f"{cluster.gpus:,}", cluster.name)
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
    o = parse_order(order or lay.rank_order)
    note("placing TP%d CP%d DP%d PP%d and routing its groups", lay.tp, lay.cp, lay.dp, lay.pp)
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
