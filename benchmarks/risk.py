"""The run-risk model applied to two published large runs; prints JSON.

- Llama 3 405B (Dubey et al. 2024): 16,384 H100, 54-day snapshot, 419 unexpected
  interruptions (Sec. 3.3.4); layout TP8 CP1 PP16 DP128 (Table 4, the 8K-context stage).
  The default interruption rate is derived from this run, so the count matches by
  construction; the goodput is the model's, with default storage and restart figures.
- MegaScale (Jiang et al. 2024, NSDI): a production run on more than 10,000 GPUs for several
  weeks, over 100 restarts, effective training time rate above 90% (Sec. 6.3). Setting
  taken here: GPT-3 175B on 12,288 A100 with TP8 PP8 DP192 (their 175B scaling runs,
  Table 2), three weeks of failure-free work.

Run: `python -m benchmarks.risk`. Not part of the test gate.
"""
from __future__ import annotations

import json

from solver.cost.accounting import parameter_counts
from solver.cost.checkpoint import checkpoint_cost
from solver.cost.risk import failure_model, run_risk
from solver.presets import load_model
from solver.specs import LayoutSpec, PrecisionRecipe
from topology.catalog import load_cluster


def _case(model: str, cluster: str, nodes: int, layout: LayoutSpec, work_days: float,
          recipe: PrecisionRecipe) -> dict:
    m = load_model(model)
    c = load_cluster(cluster).model_copy(update={"nodes": nodes})
    n = parameter_counts(m, 8192).total
    ckpt = checkpoint_cost(n, recipe, c, layout)
    fm = failure_model(c, ckpt, layout.gpus)
    r = run_risk(fm, work_days * 86_400)
    return {"gpus": layout.gpus, "parameters": n, "checkpoint_bytes": ckpt.bytes,
            "write_s": ckpt.write_s, "restart_s": fm.restart_s, "mtbi_h": fm.mtbi_s / 3600,
            "interval_s": r.interval_s, "work_days": work_days, "wall_days": r.wall_s / 86_400,
            "interruptions": r.interruptions, "goodput": r.goodput}


def main() -> None:
    mixed = PrecisionRecipe(master_weights=True)  # BF16 weights/grads, FP32 master + Adam
    llama = _case("llama3-405b", "dgx-h100-superpod", 2048,
                  LayoutSpec(tp=8, pp=16, dp=128), 54 * 0.9, mixed)
    llama["interruptions_in_54_days"] = 54 * 24 / llama["mtbi_h"]
    llama["published_interruptions"] = 419
    mega = _case("gpt3-175b", "dgx-a100-superpod", 1536, LayoutSpec(tp=8, pp=8, dp=192), 21, mixed)
    mega["published"] = {"restarts": ">100", "effective_training_time_rate": ">90%"}
    print(json.dumps({"llama3_405b": llama, "megascale_175b": mega}, indent=1))


if __name__ == "__main__":
    main()
