"""Admission control: estimate a request's work from its parsed specs, before any topology
or table is built, and refuse (422 `over_capacity`, with the estimate and the server's
bound) what cannot finish inside the server's time cap.

Two measures, both counted from the spec alone (no graph is built):
* graph elements: vertices + directed edges the topology generator would create
  (topology.generators: per GPU one vertex, an NVSwitch link and, for flat/NVLink-domain
  clusters, a NIC vertex and its links; per node its NICs; leaf-spine links; explicit graphs
  as listed). add_link adds both directions, hence the 2x on links.
* table rows: the product of the search's per-field domains (solver.search.space.domains),
  an upper bound on the rows the term tables can hold.
"""
from __future__ import annotations

from typing import Any

from topology.errors import Problem, SpecError


class OverCapacity(SpecError):
    """Valid input whose estimated work is above this server's bounds (-> 422 over_capacity)."""


def graph_elements(cluster) -> int:
    """Vertices + directed edges of the cluster's graph (see module docstring)."""
    t, nodes, gpus = cluster.topology, cluster.nodes, cluster.gpus
    kind = "flat" if t is None else t.kind
    if kind == "graph":
        return len(t.vertices) + 2 * len(t.links)
    domains = nodes if kind in ("flat", "fat_tree", "rail_optimized") else max(
        1, nodes // t.nodes_per_domain)
    vertices, links = gpus + domains, gpus  # GPUs, NVSwitch vertices, GPU-NVSwitch links
    if kind in ("flat", "nvlink_domain"):
        return vertices + gpus + 1 + 2 * (links + 2 * gpus)  # per-GPU NIC, its 2 links; core
    nics = nodes * t.nics_per_node
    leaves = nodes // t.nodes_per_leaf * (t.nics_per_node if kind == "rail_optimized" else 1)
    spine_links = t.spines * leaves if leaves >= 2 else 0
    return vertices + nics + leaves + t.spines + 2 * (links + gpus + nics + spine_links)


def search_domains(model, cluster, training, options):
    """The search's per-field domains (solver.search.space.domains): admission counts its
    table rows from them, and the search is handed the same object (not computed twice)."""
    from solver.search.space import domains

    return domains(model, cluster, training, options)


def table_rows(model, cluster, training, options, d=None) -> int:
    """Upper bound on the search's table rows: the product of its per-field domain sizes
    (`d`: the domains when already computed)."""
    d = search_domains(model, cluster, training, options) if d is None else d
    sizes = (d.tp, d.pp, d.vpp, d.cp, d.dp, d.micro_batch, d.zero_stage, d.recompute,
             d.sequence_parallel)
    out = 1
    for values in sizes:
        out *= max(1, len(values))
    return out


def admit(model, cluster, training, options, settings: Any) -> dict[str, int]:
    """The work estimate {graph_elements, table_rows}. Raises: OverCapacity above the
    settings' max_graph_elements / max_table_rows."""
    return admit_search(model, cluster, training, options, settings)[0]


def admit_search(model, cluster, training, options, settings: Any) -> tuple[dict[str, int], Any]:
    """(the work estimate, the search's domains or None without options): admit's checks,
    the domains kept so the search is handed them (solver.search.search_layouts(domains=))
    instead of computing them again (about 4 ms of a seed request). The graph is checked
    first: a request refused for its cluster costs no domain computation."""
    elements = graph_elements(cluster)
    if elements > settings.max_graph_elements:
        raise OverCapacity("cluster topology too large for this server", [Problem(
            "cluster.topology" if cluster.topology is not None else "cluster.nodes",
            f"about {elements} graph vertices and links; this server builds at most "
            f"{settings.max_graph_elements} (TRAINPLAN_MAX_GRAPH_ELEMENTS)")])
    d = search_domains(model, cluster, training, options) if options is not None else None
    rows = table_rows(model, cluster, training, options, d) if options is not None else 0
    if rows > settings.max_table_rows:
        raise OverCapacity("search space too large for this server", [Problem(
            "options", f"up to {rows} layout table rows; this server searches at most "
                       f"{settings.max_table_rows} (TRAINPLAN_MAX_TABLE_ROWS); narrow "
                       "options (e.g. allow_fewer_gpus off, max_micro_batch, max_vpp)")])
    return {"graph_elements": elements, "table_rows": rows}, d
