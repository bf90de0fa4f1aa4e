"""Audit of the bar "the layout trainplan ranks first runs, as exported, at the predicted memory,
in the framework the user names": sweeps dense and MoE problems x clusters x precisions x batch
sizes x the three frameworks; for each, search -> rank 1 -> export (the native artifact and the
launch line) -> every exported flag through the framework's extracted options and its own
argument checks (tests/service/framework_options.py, tests/service/framework_semantics.py), and
the memory the search predicted for rank 1 against what the export makes the framework do
(ZeRO / FSDP mode, recompute, state dtypes, FP8 recipe). Prints JSON: problems swept, outcomes,
every mismatch.

    .venv/bin/python -m benchmarks.audit_rank1            # the full grid (minutes)
    .venv/bin/python -m benchmarks.audit_rank1 --quick    # the grid the property test runs
    .venv/bin/python -m benchmarks.audit_rank1 --plan     # rank 1 of the plan (benchmarks/audit_plan.py)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HF = ROOT / "tests" / "fixtures" / "hf"
FRAMEWORKS = ("megatron-core", "torchtitan", "deepspeed")
SEARCH_OPTIONS = {"top_k": 1, "time_limit_s": 5}
# FP8 recipe each framework is asked for (its profile's recipes; mxfp8 on Blackwell clusters)
FP8_HOPPER = {"megatron-core": "fp8-current", "torchtitan": "fp8-rowwise", "deepspeed": "fp8-current"}
FP8_BLACKWELL = {"megatron-core": "mxfp8", "torchtitan": "mxfp8", "deepspeed": "mxfp8"}


@dataclass(frozen=True)
class Problem:
    """One search problem: a model (preset name or HF fixture), a cluster preset and its node
    count, sequence length, global batch in sequences, compute precision family, and an
    explicitly stated state precision (None: the framework's own recipe)."""

    model: str
    cluster: str
    nodes: int
    seq_len: int
    batch_seqs: int
    fp8: bool = False
    precision: tuple[int, int, int, bool] | None = None  # weight, grad, moment bytes, master
    training: tuple[tuple[str, Any], ...] = ()  # further TrainingSpec fields
    search: tuple[tuple[str, Any], ...] = ()  # further SearchOptions fields
    fp8_recipe: str | None = None  # an FP8 recipe other than the framework's default one

    @property
    def label(self) -> str:
        p = "" if self.precision is None else " prec=" + "/".join(str(int(x)) for x in self.precision)
        extra = "".join(f" {k}={v}" for k, v in self.training + self.search)
        fp8 = f" {self.fp8_recipe}" if self.fp8_recipe else (" fp8" if self.fp8 else "")
        return f"{self.model} {self.cluster}x{self.nodes} S={self.seq_len} B={self.batch_seqs}{fp8}{p}{extra}"


def _dense(quick: bool) -> list[Problem]:
    rows = [Problem("llama3-8b", "dgx-h100-superpod", 1, 8192, 256),
            Problem("hf:mistral-7b", "dgx-h100-superpod", 2, 4096, 512, fp8=True),
            Problem("hf:qwen2-7b", "dgx-h200-superpod", 2, 32768, 64),
            Problem("hf:gemma-2b", "dgx-h100-superpod", 1, 8192, 128),
            Problem("hf:gpt2", "dgx-h100-superpod", 1, 1024, 512),
            Problem("llama3-70b", "dgx-h100-superpod", 16, 8192, 512, precision=(2, 4, 2, True)),
            Problem("seed-70b", "dgx-h100-superpod", 64, 8192, 512),
            Problem("llama3-70b", "gb200-nvl72-superpod", 36, 8192, 512, fp8=True)]
    if quick:
        return rows
    rows += [Problem("llama3-8b", "dgx-h100-superpod", 4, 131072, 16),
             Problem("llama3-8b", "dgx-h200-superpod", 8, 8192, 1024, fp8=True),
             Problem("hf:llama3-8b", "gb200-nvl72-superpod", 18, 8192, 512),
             Problem("llama3-8b", "dgx-h100-superpod", 2, 8192, 256, precision=(2, 2, 4, False)),
             Problem("hf:mistral-7b", "dgx-h100-superpod", 8, 32768, 128),
             Problem("llama3-70b", "dgx-h100-superpod", 8, 8192, 256),
             Problem("llama3-70b", "dgx-h100-superpod", 32, 32768, 128, fp8=True),
             Problem("llama3-70b", "dgx-h200-superpod", 64, 8192, 1024),
             Problem("llama3-70b", "dgx-h100-superpod", 128, 131072, 64),
             Problem("seed-70b", "dgx-h100-superpod", 128, 8192, 512, fp8=True),
             Problem("seed-70b", "dgx-h200-superpod", 32, 8192, 512, precision=(2, 2, 4, True)),
             Problem("llama3-405b", "dgx-h100-superpod", 128, 8192, 2048),
             Problem("llama3-405b", "dgx-h100-superpod", 512, 8192, 2048, fp8=True),
             Problem("llama3-405b", "dgx-h200-superpod", 256, 32768, 512),
             Problem("llama3-405b", "gb200-nvl72-superpod", 144, 8192, 1024, fp8=True),
             Problem("gpt3-175b", "dgx-h100-superpod", 64, 2048, 1536),
             Problem("gpt3-175b", "dgx-h100-superpod", 256, 2048, 1536, fp8=True),
             Problem("llama3-8b", "dgx-h100-superpod", 1, 4096, 64, search=(("zero_stages", (0,)),)),
             Problem("llama3-8b", "dgx-h100-superpod", 16, 8192, 128, search=(("allow_fewer_gpus", True),)),
             Problem("llama3-70b", "dgx-h100-superpod", 16, 8192, 512, fp8=True, fp8_recipe="fp8-delayed"),
             Problem("llama3-70b", "dgx-h100-superpod", 32, 8192, 512, search=(("split_stages", True),)),
             Problem("llama3-70b", "dgx-h100-superpod", 16, 8192, 256, search=(("recompute", ("selective",)),)),
             Problem("llama3-70b", "dgx-h100-superpod", 16, 8192, 256, search=(("recompute", ("full",)),)),
             Problem("llama3-70b", "dgx-h100-superpod", 64, 16384, 256,
                     search=(("rank_orders", ("tp-cp-dp-pp", "tp-cp-pp-dp")),)),
             Problem("llama3-405b", "dgx-h100-superpod", 256, 8192, 2048, search=(("zero_stages", (0, 1)),)),
             Problem("llama3-405b", "dgx-h100-superpod", 512, 131072, 128),
             Problem("seed-70b", "seed-512", 64, 8192, 512),
             Problem("llama3-8b", "dgx-a100-superpod", 8, 4096, 512),
             Problem("llama3-70b", "hgx-b200-cluster", 32, 8192, 1024, fp8=True),
             Problem("hf:gemma-2b", "dgx-h100-superpod", 1, 8192, 1000),
             Problem("hf:qwen2-7b", "dgx-h100-superpod", 3, 4096, 384)]
    return rows


def _moe(quick: bool) -> list[Problem]:
    rows = [Problem("hf:mixtral-8x7b", "dgx-h100-superpod", 8, 4096, 512),
            Problem("hf:qwen3-30b-a3b", "dgx-h100-superpod", 4, 4096, 256, fp8=True),
            Problem("hf:deepseek-v2-lite", "dgx-h100-superpod", 2, 4096, 256)]
    if quick:
        return rows
    rows += [Problem("hf:mixtral-8x7b", "dgx-h200-superpod", 16, 4096, 1024, fp8=True),
             Problem("hf:mixtral-8x7b", "dgx-h100-superpod", 8, 32768, 64),
             Problem("hf:mixtral-8x22b", "dgx-h100-superpod", 64, 4096, 1024),
             Problem("hf:mixtral-8x22b", "gb200-nvl72-superpod", 72, 4096, 512, fp8=True),
             Problem("hf:qwen3-30b-a3b", "dgx-h100-superpod", 16, 4096, 512),
             Problem("hf:olmoe-1b-7b", "dgx-h100-superpod", 1, 4096, 256),
             Problem("hf:qwen1.5-moe-a2.7b", "dgx-h100-superpod", 2, 4096, 256),
             Problem("hf:deepseek-v2-lite", "dgx-h200-superpod", 4, 4096, 512, fp8=True),
             Problem("hf:deepseek-v3", "dgx-h100-superpod", 128, 4096, 1024),
             Problem("deepseek-v3", "h800-2048", 256, 4096, 15360, fp8=True, precision=(2, 4, 2, True)),
             Problem("hf:llama4-scout-text", "dgx-h100-superpod", 16, 8192, 256),
             Problem("hf:mixtral-8x7b", "dgx-h100-superpod", 16, 4096, 512, training=(("moe_a2a_overlap", True),)),
             Problem("hf:mixtral-8x22b", "dgx-h100-superpod", 32, 4096, 512, training=(("moe_capacity_factor", 1.25),)),
             Problem("hf:qwen3-30b-a3b", "dgx-h100-superpod", 8, 4096, 512, fp8=True, fp8_recipe="fp8-blockwise",
                     training=(("moe_a2a_overlap", True),)),
             Problem("hf:deepseek-v2-lite", "dgx-h100-superpod", 4, 4096, 256,
                     training=(("recompute_modules", ("mla_up_proj",)),), search=(("recompute", ("selective",)),)),
             Problem("hf:deepseek-v3", "dgx-h100-superpod", 256, 4096, 4096, fp8=True, fp8_recipe="fp8-blockwise"),
             Problem("hf:mixtral-8x7b", "dgx-h100-superpod", 16, 4096, 512,
                     search=(("rank_orders", ("tp-cp-dp-pp", "tp-cp-pp-dp")),)),
             Problem("hf:qwen3-30b-a3b", "dgx-h100-superpod", 64, 4096, 2048, search=(("split_stages", True),))]
    return rows


def problems(quick: bool = False) -> list[Problem]:
    """The sweep: dense then MoE problems (each run on every framework)."""
    return _dense(quick) + _moe(quick)


def plan_problems(quick: bool = False) -> list[Problem]:
    """The plan sweep: problems where a plan's defaults differ from a search's (explicit fabrics,
    where both rank orders are searched; MoE models whose layers do not divide over the stages,
    given first/last splits: DeepSeek-V2-Lite's 27 layers, Qwen1.5-MoE's 24, Mixtral's 32 over
    7 chunks, DeepSeek-V3's 61), then the search grid. `quick`: the slice the test runs."""
    fp32 = (4, 4, 4, False)
    rows = [Problem("hf:deepseek-v2-lite", "h800-2048", 2, 8192, 128, precision=fp32),
            Problem("llama3-70b", "dgx-a100-superpod-rail-optimized", 20, 4096, 512)]
    if quick:
        return rows
    rows += [Problem("hf:deepseek-v2-lite", "dgx-a100-superpod", 2, 4096, 256, precision=fp32),
             Problem("hf:qwen1.5-moe-a2.7b", "h800-2048", 4, 8192, 256, fp8=True, fp8_recipe="fp8-blockwise",
                     precision=fp32),
             Problem("hf:mixtral-8x7b", "dgx-h100-superpod-rail-optimized", 32, 4096, 512),
             Problem("hf:qwen3-30b-a3b", "dgx-h100-superpod-rail-optimized", 32, 4096, 512),
             Problem("gpt3-175b", "dgx-h100-superpod-rail-optimized", 32, 2048, 1536),
             Problem("hf:deepseek-v2-lite", "dgx-h100-superpod-rail-optimized", 32, 8192, 256),
             Problem("hf:mixtral-8x22b", "gb200-nvl72-superpod", 72, 4096, 512, fp8=True),
             Problem("hf:deepseek-v3", "h800-2048", 256, 4096, 15360, fp8=True, precision=(2, 4, 2, True)),
             Problem("hf:deepseek-v3", "dgx-h100-superpod", 128, 4096, 1024)]
    return rows + problems(False)


# (model, nodes of 8 GPUs it is sampled on) for random problems: sizes where it can fit
_RANDOM_MODELS = {"llama3-8b": (1, 64), "llama3-70b": (8, 256), "llama3-405b": (64, 512), "seed-70b": (8, 256),
                  "gpt3-175b": (32, 256), "hf:mistral-7b": (1, 64), "hf:qwen2-7b": (1, 64), "hf:gemma-2b": (1, 16),
                  "hf:mixtral-8x7b": (4, 64), "hf:mixtral-8x22b": (16, 128), "hf:qwen3-30b-a3b": (2, 64),
                  "hf:deepseek-v2-lite": (1, 32), "hf:qwen1.5-moe-a2.7b": (1, 16), "hf:deepseek-v3": (64, 256)}
_RANDOM_SEARCH = [(), (("zero_stages", (0, 1)),), (("recompute", ("none", "selective")),), (("max_vpp", 2),),
                  (("rank_orders", ("tp-cp-dp-pp", "tp-cp-pp-dp")),), (("split_stages", True),),
                  (("allow_fewer_gpus", True),), (("max_micro_batch", 1),), (("zero_stages", (2, 3)),)]
_RANDOM_TRAINING = [(), (("moe_a2a_overlap", True),), (("moe_capacity_factor", 1.0),),
                    (("attention_kernel", "unfused"),)]
_PRECISIONS = [None, None, (2, 4, 2, True), (2, 2, 4, False), (2, 2, 2, False), (2, 2, 4, True), (4, 4, 4, False)]


def random_problems(count: int, seed: int) -> list[Problem]:
    """`count` problems drawn from the grid's axes (a fixed seed gives a fixed list)."""
    import random

    rng, out = random.Random(seed), []
    for _ in range(count):
        model = rng.choice(sorted(_RANDOM_MODELS))
        lo, hi = _RANDOM_MODELS[model]
        cluster = rng.choice(["dgx-h100-superpod", "dgx-h100-superpod", "dgx-h200-superpod", "gb200-nvl72-superpod",
                              "hgx-b200-cluster", "h800-2048"])
        nodes = rng.choice([n for n in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512) if lo <= n <= hi])
        if cluster.startswith("gb200"):  # NVL72 domains: 18 trays of 4 GPUs
            nodes = max(18, 18 * round(nodes * 2 / 18))
        seq = rng.choice([2048, 4096, 8192, 8192, 16384, 32768, 131072])
        tokens = rng.choice([2, 4, 8, 16]) * 2 ** 20
        batch = max(1, tokens // seq)
        fp8 = rng.random() < 0.35
        recipe = rng.choice([None, None, "fp8-delayed", "fp8-blockwise"]) if fp8 else None
        out.append(Problem(model, cluster, nodes, seq, batch, fp8=fp8, precision=rng.choice(_PRECISIONS),
                           training=rng.choice(_RANDOM_TRAINING), search=rng.choice(_RANDOM_SEARCH),
                           fp8_recipe=recipe))
    return out


def _spec(p: Problem, framework: str) -> tuple[Any, Any, Any]:
    from solver.presets import load_model
    from solver.specs import PrecisionRecipe, TrainingSpec
    from topology.catalog import load_cluster

    model = load_model(str(HF / p.model[3:] / "config.json") if p.model.startswith("hf:") else p.model)
    cluster = load_cluster(p.cluster).model_copy(update={"nodes": p.nodes})
    blackwell = p.cluster.startswith(("gb200", "hgx-b200"))
    fields: dict[str, Any] = {"seq_len": p.seq_len, "global_batch_tokens": p.seq_len * p.batch_seqs,
                              "tokens": 1e11, "framework": framework}
    if p.fp8:
        fields["compute_precision"] = p.fp8_recipe or (FP8_BLACKWELL if blackwell else FP8_HOPPER)[framework]
    fields.update(dict(p.training))
    if p.precision is not None:
        w, g, mom, master = p.precision
        fields["precision"] = PrecisionRecipe(weight_bytes=w, grad_bytes=g, optimizer_moment_bytes=mom,
                                              master_weights=master)
    return model, cluster, TrainingSpec(**fields)


def search_failure(out: dict[str, Any], exc: Exception) -> dict[str, Any]:
    """The outcome of a problem whose search raised: 'refused_up_front' for a SpecError (a
    mismatch when a refusal names no field with the framework source it rests on), else
    'infeasible'."""
    from solver.errors import SpecError

    if isinstance(exc, SpecError):
        bad = [q.field for q in exc.problems if not (q.field.startswith(("model.", "training."))
                                                      and ".py" in q.reason)]
        return {**out, "outcome": "refused_up_front", "reason": exc.message[:300],
                "mismatches": [f"refusal without a field and a framework source: {bad}"] if bad else []}
    return {**out, "outcome": "infeasible", "reason": str(exc)[:200], "mismatches": []}


def audit(p: Problem, framework: str) -> dict[str, Any]:
    """One problem on one framework: the outcome ('exported', 'refused_up_front', 'infeasible')
    and every mismatch found (empty when rank 1 runs as exported at the predicted memory)."""
    from service.launchers import export_layout, framework_rules, rank_placement
    from solver.errors import InfeasibleError, SpecError
    from solver.search import search_layouts
    from solver.specs import LayoutSpec
    from tests.service.framework_semantics import export_mismatches

    out: dict[str, Any] = {"problem": p.label, "framework": framework}
    try:
        model, cluster, training = _spec(p, framework)
        options = {**SEARCH_OPTIONS, **dict(p.search)}
        result = search_layouts(model, cluster, training, options, explain=False).as_dict()
    except (SpecError, InfeasibleError) as exc:
        return search_failure(out, exc)
    best = result["layouts"][0]
    layout = LayoutSpec.model_validate({k: best[k] for k in LayoutSpec.model_fields if k in best}, strict=False)
    split = best.get("pipeline_split")
    out["layout"] = {k: v for k, v in layout.model_dump(mode="json").items() if v is not None}
    out["memory_gb"] = round(best["memory_per_gpu_bytes"]["total"] / 1e9, 2)
    rules = framework_rules(framework, model, training, layout, split)
    if rules:
        return {**out, "outcome": "rank1_refused_by_export", "mismatches": [f"{f}: {r}" for f, r in rules]}
    try:
        launch = export_layout(framework, model, training, layout, rank_placement(cluster, layout), split)
    except (SpecError, ValueError) as exc:
        return {**out, "outcome": "export_failed", "mismatches": [f"export raised: {exc}"[:400]]}
    found = export_mismatches(framework, model, cluster, training, layout, split, best["estimate"], launch)
    return {**out, "outcome": "exported", "mismatches": found}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the small grid the property test runs")
    ap.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS), choices=FRAMEWORKS)
    ap.add_argument("--match", default="", help="only problems whose label contains this text")
    ap.add_argument("--random", type=int, default=0, metavar="N", help="N random problems instead of the grid")
    ap.add_argument("--seed", type=int, default=0, help="seed of --random")
    ap.add_argument("--plan", choices=("cli", "http"), default=None,
                    help="audit rank 1 of the plan (`trainplan plan` / POST /v1/plans search options, "
                         "MoE splits on) instead of the search's (benchmarks/audit_plan.py)")
    args = ap.parse_args(argv)
    run: Callable[[Problem, str], dict[str, Any]] = audit
    if args.plan is not None:
        from benchmarks.audit_plan import plan_audit

        run = lambda p, fw: plan_audit(p, fw, args.plan)  # noqa: E731
    start, rows = time.perf_counter(), []
    grid = plan_problems(args.quick) if args.plan else problems(args.quick)
    for p in random_problems(args.random, args.seed) if args.random else grid:
        if args.match not in p.label:
            continue
        for fw in args.frameworks:
            t0 = time.perf_counter()
            row = run(p, fw)
            row["seconds"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
            print(f"{row['outcome']:>24} {len(row['mismatches'])} {fw:>13} {p.label} ({row['seconds']} s)",
                  file=sys.stderr)
    outcomes = Counter(r["outcome"] for r in rows)
    summary = {"problems": len({r["problem"] for r in rows}), "runs": len(rows), "outcomes": dict(outcomes),
               "runs_with_mismatches": sum(bool(r["mismatches"]) for r in rows),
               "mismatches": sum(len(r["mismatches"]) for r in rows),
               "seconds": round(time.perf_counter() - start, 1), "rows": rows}
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
