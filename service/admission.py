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

A plan (POST /v1/plans) is also admitted on its time (admit_plan): it builds the tables of
several searches (plan_builds: the main search once per rank order, each scaling-grid row's
search once per rank order, the seed ladder's ranking twice), each over its pipeline rows,
which the tables' pruning bounds row group by row group (solver.search.prune: a group is the
rows of one (tp, pp, cp, dp, sp, micro_batch, ep, etp), model.pipe_group); its estimate is
those groups times the seconds one group costs on this server (settings.plan_row_group_s; a
group of the ladder's ranking, built in full, RANKED_GROUP_WEIGHT times that), refused when
above settings.plan_admit_fraction of the request's deadline (settings.max_time_limit_s).
Groups, not rows, predict the time: the plan benchmark's warm CPU seconds per group are 70-98
us on dense and MoE plans alike, per row 5-13 us (a MoE split group holds ~20 rows, a dense
one ~9).
"""
from __future__ import annotations

from typing import Any

from topology.errors import Problem, SpecError


# A row group of the seed ladder's ranking (solver.search.api.layout_rank: every row within the
# layout's step time evaluated, and a memory-only table of all rows) costs this many pruned
# search groups: the plan benchmark's Mixtral 8x7B plan (README "Plan latency", warm CPU 7.51 s
# at load 4-5): its searches' 38,088 groups at Qwen3-30B-A3B's 98 us per group = 3.7 s, the
# ranking's 21,128 groups the other 3.8 s, 180 us per group: 1.8x.
RANKED_GROUP_WEIGHT = 2.0


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


LADDER = "ladder ranking"


def plan_builds(model, cluster, training, options, cost_options: Any = None) -> list[tuple[str, Any, int]]:
    """(what, search options, table builds) of every table build solver.plan.build_plan makes:
    the main search (solver.search.api.plan_options: MoE splits on) and each scaling-grid row
    (solver.plan_stages.grid_options) once per rank order the framework places
    (api.placeable_orders), the seed ladder's ranking (api.layout_rank: a step-time table and a
    memory-only one, default options) when the ladder's choice fits by the cost model
    (solver.layouts.ladder_versus_best; `cost_options`: a calibrated profile's). Not counted: a
    fallback over fewer GPUs or an infeasibility explanation (the plan then has no layout)."""
    from solver.cost.estimate import estimate_layout
    from solver.layouts import ladder_or_none
    from solver.plan import layout_fields
    from solver.plan_stages import grid_options, searched_grid_sizes
    from solver.search.api import placeable_orders, plan_options
    from solver.search.options import SearchOptions
    from solver.specs import LayoutSpec

    def orders(o: Any) -> Any:
        return placeable_orders(training.framework, o)

    main = orders(plan_options(options))
    out = [("search", main, len(main.rank_orders))]
    for g in searched_grid_sizes(cluster):
        o = orders(SearchOptions.model_validate(grid_options(cluster, g)))
        out.append((f"scaling grid {g} GPUs", o, len(o.rank_orders)))
    rungs = ladder_or_none(model, cluster, training)[1]
    try:
        ranked = bool(rungs) and estimate_layout(model, cluster, training, LayoutSpec(**layout_fields(rungs[0])),
                                                 cost_options).fits
    except SpecError:  # the plan itself says why (its search comes first)
        ranked = False
    if ranked:
        out.append((LADDER, SearchOptions(), 2))
    return out


def table_size(model, cluster, training, options) -> tuple[int, int]:
    """(pipeline rows, row groups) of one search's tables before pruning
    (solver.search.cpsat.LayoutModel.row_counts: every structurally valid row, the rows the
    pruning visits, and their groups, solver.search.model.pipe_group), counted without building
    the rows (DeepSeek-V3's plan enumerated 913,792 of them in 2.6 s before its search)."""
    from solver.search.cpsat import LayoutModel

    return LayoutModel(model, cluster, training, options).row_counts()


def plan_work(model, cluster, training, options, settings: Any, cost_options: Any = None) -> dict[str, Any]:
    """A plan's work estimate: its table builds (plan_builds) with their pipeline rows and row
    groups, the totals and the seconds the groups take at settings.plan_row_group_s."""
    parts, rows, groups, weighted = [], 0, 0, 0.0
    for what, o, builds in plan_builds(model, cluster, training, options, cost_options):
        n_rows, n_groups = table_size(model, cluster, training, o)
        parts.append({"what": what, "builds": builds, "rows_per_build": n_rows, "groups_per_build": n_groups})
        rows, groups = rows + builds * n_rows, groups + builds * n_groups
        weighted += builds * n_groups * (RANKED_GROUP_WEIGHT if what == LADDER else 1.0)
    return {"plan_table_rows": rows, "plan_row_groups": groups,
            "plan_estimate_s": weighted * settings.plan_row_group_s, "plan_builds": parts}


def admit_plan(model, cluster, training, options, settings: Any, cost_options: Any = None) -> dict[str, Any]:
    """plan_work, checked against the deadline. Raises: OverCapacity when the estimate is above
    settings.plan_admit_fraction x settings.max_time_limit_s."""
    work = plan_work(model, cluster, training, options, settings, cost_options)
    bound_s = settings.plan_admit_fraction * settings.max_time_limit_s
    if work["plan_estimate_s"] > bound_s:
        builds = "; ".join(f"{p['what']}: {p['builds']} x {p['groups_per_build']:,}" for p in work["plan_builds"])
        raise OverCapacity("plan too large for this server's deadline", [Problem(
            "options", f"the plan builds {work['plan_row_groups']:,} table row groups ({builds}; "
                       f"{work['plan_table_rows']:,} rows), about {work['plan_estimate_s']:.2f} s at "
                       f"{settings.plan_row_group_s * 1e6:g} us per group (TRAINPLAN_PLAN_ROW_GROUP_S; "
                       f"{RANKED_GROUP_WEIGHT:g}x for the {LADDER}); "
                       f"this server admits plans estimated at most {bound_s:g} s, "
                       f"{settings.plan_admit_fraction:.0%} of its {settings.max_time_limit_s:g} s deadline "
                       "(TRAINPLAN_PLAN_ADMIT_FRACTION, TRAINPLAN_MAX_TIME_LIMIT_S); narrow options (e.g. "
                       "rank_orders, moe_splits false, max_vpp, max_micro_batch)")])
    return work
