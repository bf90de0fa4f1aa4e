"""A small synthetic cost with the same shape as the real one, to test the search engine alone.

step = accum x t_mb + (pp - 1)/vpp x t_mb + sync, memory = state + activations, where each
term reads only a few layout fields. A MoE model adds expert terms that read ep and etp
(etp 0: a dense layout, no expert terms): expert GEMMs split over ep x etp with an imbalance
growing with ep, a token all-to-all that is dearer when the EP x ETP block leaves the node,
expert weights sharded over ep x etp and their optimizer over the expert-DP ranks. The real
cost model is tested against the search in test_search_exact.py; this one isolates the CP-SAT
engine, the window and the ranking.
"""
from __future__ import annotations

from dataclasses import dataclass

from solver.search.cpsat import RECOMPUTE_NAMES
from solver.search.model import TermRows
from solver.search.exhaustive import Evaluated
from solver.search.objective import meets_deadline, objective_units
from solver.search.rules import accumulation
from solver.search.scaling import time_int

REC = {"none": 1.0, "selective": 1.07, "full": 1.33}
ACT = {"none": 1.0, "selective": 0.6, "full": 0.1}


GPUS_PER_NODE = 4  # the EP x ETP block leaves the node above this (the MoE tests' clusters)


def t_mb_s(model, tp, cp, sequence_parallel, recompute, micro_batch, pp, vpp, ep=1, etp=0):
    per_layer = 1e-3 * micro_batch * REC[recompute] / (tp * cp) + (2e-5 * tp if tp > 1 else 0.0)
    per_layer *= 0.97 if sequence_parallel else 1.0
    if etp:  # expert GEMMs over ep x etp ranks, the busiest rank 3% slower per extra EP rank
        per_layer += 2e-3 * micro_batch * REC[recompute] * (1 + 0.03 * (ep - 1)) / (ep * etp * cp)
        per_layer += 4e-4 * micro_batch * (ep - 1) / ep * (3.0 if ep * etp > GPUS_PER_NODE else 1.0)
    return per_layer * -(-model.layers // pp)


def sync_s(model, tp, pp, dp, cp, zero_stage, ep=1, etp=0):
    dense = 1e-4 * model.layers * (dp - 1) / dp / (tp * pp) * (1 + 0.1 * zero_stage) + 1e-5 * cp
    if not etp:
        return dense
    edp = tp * cp * dp // (ep * etp)
    return dense + 3e-4 * model.layers * (edp - 1) / edp / (ep * etp * pp)


def state_bytes(model, tp, pp, dp, cp, zero_stage, ep=1, etp=0):
    params = 1e6 * model.layers
    local = params / (tp * pp)
    shard = dp * cp
    dense = local * (2 + 2 / (shard if zero_stage >= 2 else 1) + 8 / (shard if zero_stage >= 1 else 1)
                     ) / (shard if zero_stage >= 3 else 1)
    if not etp:
        return dense
    edp = tp * cp * dp // (ep * etp)
    experts = 4e6 * model.layers / (ep * etp * pp)
    return dense + experts * (2 + 2 / (edp if zero_stage >= 2 else 1) + 8 / (edp if zero_stage >= 1 else 1)
                              ) / (edp if zero_stage >= 3 else 1)


def act_bytes(model, tp, cp, sequence_parallel, recompute, micro_batch, pp, vpp, ep=1, etp=0):
    per_layer = 2e6 * micro_batch * ACT[recompute] / (cp * (tp if sequence_parallel else 1))
    if etp:  # dispatched tokens of the busiest expert rank
        per_layer += 1e6 * micro_batch * ACT[recompute] * (1 + 0.03 * (ep - 1)) / (cp * etp)
    return per_layer * -(-model.layers // pp) * pp


@dataclass
class SyntheticEstimate:
    step_time_s: float
    mfu: float
    memory_per_gpu_bytes: dict
    fits: bool

    def as_dict(self):
        return {"step_time_s": self.step_time_s, "memory_per_gpu_bytes": self.memory_per_gpu_bytes}


def estimate(model, cluster, training, layout, capacity_bytes):
    xkw = {} if model.moe is None else {"ep": layout.ep, "etp": layout.expert_tp}
    kw = dict(tp=layout.tp, cp=layout.cp, sequence_parallel=layout.sequence_parallel,
              recompute=layout.recompute, micro_batch=layout.micro_batch, pp=layout.pp, vpp=layout.vpp, **xkw)
    t = t_mb_s(model, **kw)
    acc = accumulation(training, layout.dp, layout.micro_batch)
    step = (acc * t + (layout.pp - 1) / layout.vpp * t) + sync_s(
        model, layout.tp, layout.pp, layout.dp, layout.cp, layout.zero_stage, **xkw)
    mem = state_bytes(model, layout.tp, layout.pp, layout.dp, layout.cp, layout.zero_stage, **xkw) + \
        act_bytes(model, **kw)
    return SyntheticEstimate(step, 0.5, {"total": mem}, mem <= capacity_bytes)


def evaluator(model, cluster, training, options, capacity_bytes):
    def ev(layout):
        est = estimate(model, cluster, training, layout, capacity_bytes)
        if not est.fits or not meets_deadline(options, training, layout, est.step_time_s):
            return None
        return Evaluated(layout, est, objective_units(options, training, layout, est.step_time_s))
    return ev


def rows_builder(capacity_bytes):
    """Synthetic cost tables in the shape solver.search.terms.term_rows produces."""
    def build(lm):
        m, training = lm.spec, lm.training
        keys, pipe, act = [], [], []
        for key in lm.pipeline_rows():
            tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp = key
            kw = {"tp": tp, "cp": cp, "sequence_parallel": bool(sp), "recompute": RECOMPUTE_NAMES[rc],
                  "micro_batch": mb, "pp": pp, "vpp": vpp, "ep": ep, "etp": etp}
            t = t_mb_s(m, **kw)
            acc = accumulation(training, dp, mb)
            keys.append(key)
            pipe.append(time_int(acc * t + (pp - 1) / vpp * t))
            act.append(act_bytes(m, **kw))
        shards = sorted({(tp, pp, cp, dp, sp, z, mb, ep, etp) for tp, pp, cp, dp, vpp, mb, sp, rc, ep, etp in keys
                         for z in lm.zero_stages(tp, pp, cp, dp, ep, etp)})
        sync = [time_int(sync_s(m, tp, pp, dp, cp, z, ep, etp)) for tp, pp, cp, dp, sp, z, mb, ep, etp in shards]
        state = [state_bytes(m, tp, pp, dp, cp, z, ep, etp) for tp, pp, cp, dp, sp, z, mb, ep, etp in shards]
        return TermRows(keys, pipe, shards, sync, 1.0,
                        lambda i, j: state[j] + act[i] <= capacity_bytes,
                        lambda i, j: state[j] + act[i], act, state)
    return build
