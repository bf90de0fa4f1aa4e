"""The layout structure as CP-SAT sees it: valid rows, rule families, solve helpers.

`LayoutModel` computes the structurally valid combinations (solver.search.rules) as
rows: degree rows (tp, pp, cp, dp), batch rows (dp, micro_batch, accum) and pipeline
rows (tp, pp, cp, dp, vpp, micro_batch, sp, recompute, ep, etp), which the cost tables are
built on (solver.search.model); a dense model's rows carry ep 1 and etp rules.DENSE_ETP.
With `explain=True` it also builds one integer variable per layout field (recompute coded
none=0, selective=1, full=2; sequence_parallel 0/1; etp DENSE_ETP for unset) and each
rule family as allowed-tuple tables over only the fields it reads, each enforced by its own
assumption literal, so an infeasible core names the families that clash
(google/or-tools sat/docs/troubleshooting.md, "assumptions").
"""
from __future__ import annotations

import itertools
import time
from typing import Any
from collections.abc import Iterable, Sequence

from ortools.sat.python import cp_model

from solver.search import rules
from solver.search.options import SearchOptions
from solver.search.space import Domains, domains
from solver.specs import LayoutSpec, ModelSpec, Recompute, TrainingSpec
from topology.spec import ClusterSpec

FIELDS = ("tp", "pp", "vpp", "cp", "dp", "micro_batch", "zero_stage", "recompute", "sequence_parallel",
          "ep", "etp")
RECOMPUTE_CODES: dict[Recompute, int] = {"none": 0, "selective": 1, "full": 2}
RECOMPUTE_NAMES: dict[int, Recompute] = {v: k for k, v in RECOMPUTE_CODES.items()}


class LayoutModel:
    """A CP-SAT model whose solutions are exactly the structurally valid layouts."""

    def __init__(self, model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec,
                 options: SearchOptions, explain: bool = False, dom: Domains | None = None) -> None:
        """dom: space.domains(model, cluster, training, options) when the caller has them
        (service admission); not used with explain (its domains are the raw ones)."""
        self.spec, self.cluster, self.training, self.options = model, cluster, training, options
        self.cp = cp_model.CpModel()
        self.dom: Domains = dom if dom is not None and not explain else domains(
            model, cluster, training, options, raw=explain)
        self.literals: dict[str, cp_model.IntVar] = {}
        self.explain = explain
        self.var: dict[str, cp_model.IntVar] = {}
        self.values: dict[str, tuple[int, ...]] = {}
        self._zero: dict[tuple, tuple[int, ...]] = {}
        self._experts: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
        self._vpps: dict[tuple[int, int, int], list[tuple[int, list[int]]]] = {}  # _vpp_rcs
        self._mbs: dict[tuple[int, int, int], list[int]] = {}  # _micro_batches
        self._fields()
        self._tensor()
        self._pipeline()
        self._context()
        self._gpus()
        self._batch()
        self._framework()
        self._expert()

    # --- variables -------------------------------------------------------------------
    def _new(self, name: str, values: Iterable[int]) -> cp_model.IntVar:
        vals = tuple(sorted({int(v) for v in values}))
        self.values[name] = vals
        domain = cp_model.Domain.from_values(list(vals)) if vals else cp_model.Domain(0, 0)
        self.var[name] = self.cp.new_int_var_from_domain(domain, name)
        if not vals:  # an empty domain: the model is infeasible, say so through a family
            self.cp.add_bool_or([]).only_enforce_if(self._lit("tensor" if name == "tp" else "gpus"))
        return self.var[name]

    def _fields(self) -> None:
        d = self.dom
        for name in ("tp", "pp", "vpp", "cp", "dp", "micro_batch", "zero_stage", "ep", "etp"):
            self._new(name, getattr(d, name))
        self._new("recompute", [RECOMPUTE_CODES[r] for r in d.recompute])
        self._new("sequence_parallel", [int(s) for s in d.sequence_parallel])

    def _lit(self, family: str) -> list:
        """Enforcement literals of one family (an assumption when explaining)."""
        if not self.explain:
            return []
        if family not in self.literals:
            lit = self.cp.new_bool_var(f"family_{family}")
            self.literals[family] = lit
            self.cp.add_assumption(lit)
        return [self.literals[family]]

    def _allowed(self, family: str, names: Sequence[str], rows: list[tuple]) -> None:
        if not self.explain:  # the search model is built on the rows, not on these tables
            return
        ct = self.cp.add_allowed_assignments([self.var[n] for n in names], rows)
        for lit in self._lit(family):
            ct.only_enforce_if(lit)

    # --- structural families -----------------------------------------------------------
    def _tensor(self) -> None:
        """TP divides heads / kv heads, stays in a node; sequence parallelism needs TP > 1."""
        rows = [(t, s) for t in self.values["tp"] for s in self.values["sequence_parallel"]
                if rules.sequence_parallel_ok(t, bool(s))
                and rules.tensor_ok(self.spec, self.cluster, self.options, t)
                and rules.framework_tensor_ok(self.training, t, bool(s))]
        self._allowed("tensor", ("tp", "sequence_parallel"), rows)

    def _pipeline(self) -> None:
        """PP x VPP chunks of >= 1 layer; even split unless uneven stages are allowed."""
        rows = [(p, v) for p in self.values["pp"] for v in self.values["vpp"]
                if rules.pipeline_ok(self.spec, self.options, p, v, self.training)
                and rules.framework_pipeline_ok(self.training, p, v)]
        self._allowed("pipeline", ("pp", "vpp"), rows)

    def _context(self) -> None:
        """CP divides the sequence into 2 x cp chunks."""
        rows = [(c,) for c in self.values["cp"]
                if rules.context_ok(self.training, c) and rules.framework_context_ok(self.training, c)]
        self._allowed("context", ("cp",), rows)

    def _gpus(self) -> None:
        """tp x pp x cp x dp = GPUs used (all available, or at most that when allowed)."""
        rows = [(t, p, c, d, t * p * c * d) for t, p, c, d in itertools.product(
            self.values["tp"], self.values["pp"], self.values["cp"], self.values["dp"])
            if rules.gpus_ok(self.cluster, self.options, t * p * c * d)]
        self._gpu_rows = rows
        self._new("gpus", [r[-1] for r in rows] or [0])
        self._allowed("gpus", ("tp", "pp", "cp", "dp", "gpus"), rows)

    def _batch(self) -> None:
        """dp x micro_batch x accum x seq_len hits the target batch; interleaving needs pp | accum."""
        rows = [(d, m, rules.accumulation(self.training, d, m))
                for d in self.values["dp"] for m in self.values["micro_batch"]
                if rules.batch_ok(self.training, self.options, d, m)]
        self._batch_rows = rows
        self._batch_map = {(d, m): a for d, m, a in rows}
        self._new("accum", [r[-1] for r in rows] or [1])
        self._allowed("batch", ("dp", "micro_batch", "accum"), rows)
        inter = [(p, v, a) for p in self.values["pp"] for v in self.values["vpp"]
                 for a in self.values["accum"] if rules.interleave_batch_ok(p, v, a, self.training)]
        self._allowed("pipeline", ("pp", "vpp", "accum"), inter)

    def _framework(self) -> None:
        """The ZeRO stages training.framework runs at each PP (and with the TP and CP)."""
        rows = [(t, p, c, z) for t, p, c, z in itertools.product(
            self.values["tp"], self.values["pp"], self.values["cp"], self.values["zero_stage"])
            if rules.framework_shard_ok(self.training, t, p, c, z)]
        self._allowed("framework", ("tp", "pp", "cp", "zero_stage"), rows)

    def _expert(self) -> None:
        """EP divides the experts, EP x ETP the stage's TP x CP x DP ranks, ETP the expert
        width (rules.expert_ok); the framework's expert rules (MoE models only: a dense model's
        ep and etp have one value each)."""
        if self.spec.moe is None or not self.explain:
            return
        v = self.values
        rows = [(t, c, d, e, x) for t, c, d, e, x in itertools.product(v["tp"], v["cp"], v["dp"], v["ep"], v["etp"])
                if rules.expert_ok(self.spec, self.cluster, self.options, t, c, d, e, x)]
        self._allowed("experts", ("tp", "cp", "dp", "ep", "etp"), rows)
        fw = [(t, p, c, s, e, x) for t, p, c, s, e, x in itertools.product(
            v["tp"], v["pp"], v["cp"], v["sequence_parallel"], v["ep"], v["etp"])
            if rules.framework_expert_ok(self.training, t, p, c, bool(s), e, x)]
        self._allowed("framework", ("tp", "pp", "cp", "sequence_parallel", "ep", "etp"), fw)
        overlap = [(p, w, e, x, r) for p, w, e, x, r in itertools.product(
            v["pp"], v["vpp"], v["ep"], v["etp"], v["recompute"])
            if rules.moe_overlap_ok(self.training, p, w, e, x, RECOMPUTE_NAMES[r])]
        self._allowed("framework", ("pp", "vpp", "ep", "etp", "recompute"), overlap)
        shard = [(t, c, d, z, e, x) for t, c, d, z, e, x in itertools.product(
            v["tp"], v["cp"], v["dp"], v["zero_stage"], v["ep"], v["etp"])
            if rules.framework_expert_shard_ok(self.training, t, c, d, z, e, x)]
        self._allowed("framework", ("tp", "cp", "dp", "zero_stage", "ep", "etp"), shard)

    def expert_pairs(self, tp: int, cp: int, dp: int) -> list[tuple[int, int]]:
        """(ep, etp) pairs the structural expert rule admits at these degrees (memoized)."""
        key = (tp, cp, dp)
        if key not in self._experts:
            self._experts[key] = [(e, x) for e in self.values["ep"] for x in self.values["etp"]
                                  if rules.expert_ok(self.spec, self.cluster, self.options, tp, cp, dp, e, x)]
        return self._experts[key]

    def zero_stages(self, tp: int, pp: int, cp: int, dp: int = 1, ep: int = 1,
                    etp: int = rules.DENSE_ETP) -> tuple[int, ...]:
        """The searched ZeRO stages the framework runs with these degrees (shard rows; memoized)."""
        key = (tp, pp, cp, dp, ep, etp) if etp != rules.DENSE_ETP else (tp, pp, cp)
        if key not in self._zero:
            dense = self._zero.get((tp, pp, cp))  # the dense rule reads tp, pp and cp only
            if dense is None:
                dense = self._zero[(tp, pp, cp)] = tuple(
                    z for z in self.values["zero_stage"] if rules.framework_shard_ok(self.training, tp, pp, cp, z))
            self._zero[key] = tuple(z for z in dense
                                    if rules.framework_expert_shard_ok(self.training, tp, cp, dp, z, ep, etp))
        return self._zero[key]

    def degree_rows(self) -> list[tuple[int, int, int, int]]:
        """Valid (tp, pp, cp, dp) combinations (the gpus family's table)."""
        return [r[:4] for r in self._gpu_rows]

    def pipeline_rows(self) -> Iterable[tuple]:
        """Valid (tp, pp, cp, dp, vpp, micro_batch, sequence_parallel, recompute, ep, etp)
        combinations.

        Every structural rule is applied, so each row extends to a layout with each ZeRO stage
        of zero_stages(tp, pp, cp, dp, ep, etp) (degrees with none are left out).
        """
        for tp, pp, cp, dp in self.degree_rows():
            for ep, etp in self.expert_pairs(tp, cp, dp):
                if self.zero_stages(tp, pp, cp, dp, ep, etp):
                    yield from self._rows(tp, pp, cp, dp, ep, etp)

    def row_counts(self) -> tuple[int, int]:
        """(rows, row groups) pipeline_rows would yield, counted per set of degrees without
        building the rows: a degree set's rows are its sp values x, over vpp, micro-batches x
        recompute codes; its groups (solver.search.model.pipe_group) its sp values x the
        micro-batches of the vpps that have a recompute code."""
        rows = groups = 0
        for tp, pp, cp, dp in self.degree_rows():
            for ep, etp in self.expert_pairs(tp, cp, dp):
                if self.zero_stages(tp, pp, cp, dp, ep, etp):
                    n_sp = len(self._sps(tp, pp, cp, ep, etp))
                    mbs: set[int] = set()
                    for vpp, rcs in self._vpp_rcs(pp, ep, etp):
                        some = self._micro_batches(dp, pp, vpp) if rcs else []
                        rows += n_sp * len(some) * len(rcs)
                        mbs.update(some)
                    groups += n_sp * len(mbs)
        return rows, groups

    def _sps(self, tp: int, pp: int, cp: int, ep: int, etp: int) -> list[int]:
        """The sequence-parallel values (0 or 1) the rules admit (they read neither vpp nor the
        micro-batch)."""
        return [sp for sp in self.values["sequence_parallel"]
                if rules.sequence_parallel_ok(tp, bool(sp)) and rules.framework_tensor_ok(self.training, tp, bool(sp))
                and rules.framework_expert_ok(self.training, tp, pp, cp, bool(sp), ep, etp)]

    def _rows(self, tp: int, pp: int, cp: int, dp: int, ep: int, etp: int) -> Iterable[tuple]:
        """The pipeline rows of one set of degrees (vpp, then micro-batch, sp, recompute)."""
        sps = self._sps(tp, pp, cp, ep, etp)  # tested once per degree set
        for vpp, rcs in self._vpp_rcs(pp, ep, etp):
            tail = [(sp, rc) for sp in sps for rc in rcs]
            for mb in self._micro_batches(dp, pp, vpp):
                for sp, rc in tail:
                    yield (tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp)

    def _vpp_rcs(self, pp: int, ep: int, etp: int) -> list[tuple[int, list[int]]]:
        """(vpp, recompute codes) pairs the pipeline and overlap rules admit (memoized: these
        rules read neither tp, cp, dp nor the micro-batch)."""
        key = (pp, ep, etp)
        if key not in self._vpps:
            self._vpps[key] = [
                (vpp, [rc for rc in self.values["recompute"]
                       if rules.moe_overlap_ok(self.training, pp, vpp, ep, etp, RECOMPUTE_NAMES[rc])])
                for vpp in self.values["vpp"]
                if rules.pipeline_ok(self.spec, self.options, pp, vpp, self.training)
                and rules.framework_pipeline_ok(self.training, pp, vpp)]
        return self._vpps[key]

    def _micro_batches(self, dp: int, pp: int, vpp: int) -> list[int]:
        """The micro-batches with a batch row at dp whose accumulation the interleaving rule
        admits at (pp, vpp) (memoized)."""
        key = (dp, pp, vpp)
        if key not in self._mbs:
            batch = self._batch_map
            self._mbs[key] = [mb for mb in self.values["micro_batch"] if (dp, mb) in batch
                              and rules.interleave_batch_ok(pp, vpp, batch[(dp, mb)], self.training)]
        return self._mbs[key]

    def layout(self, solver_values: dict[str, int]) -> LayoutSpec:
        """The LayoutSpec of one solution's field values."""
        return LayoutSpec(**decode({f: solver_values[f] for f in FIELDS}))


def decode(values: dict[str, int]) -> dict:
    """Integer field values -> LayoutSpec field values (recompute name, sequence_parallel bool)."""
    out: dict[str, Any] = dict(values)
    if "recompute" in out:
        out["recompute"] = RECOMPUTE_NAMES[out["recompute"]]
    if "sequence_parallel" in out:
        out["sequence_parallel"] = bool(out["sequence_parallel"])
    if out.get("etp") == rules.DENSE_ETP:
        out["etp"] = None
    return out


def make_solver(options: SearchOptions, deadline: float, workers: int | None = None) -> cp_model.CpSolver:
    """A solver with a time limit (what is left of the search budget), workers and a seed."""
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, deadline - time.perf_counter())
    solver.parameters.num_workers = workers or options.workers
    solver.parameters.random_seed = options.seed
    return solver
