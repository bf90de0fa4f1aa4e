"""One test per capability rule per framework: the structural space without the framework
rules holds layouts that break the rule; with them neither the exhaustive oracle's space
nor the CP-SAT search returns one, and both agree on the best layouts.

Rule sources: solver/data/frameworks/<name>.json (each fact cited to the framework's code).
"""
from __future__ import annotations

import pytest

from solver.frameworks import load_framework
from solver.frameworks.capability import violations
from solver.search import exhaustive_search, search_layouts
from solver.search import rules
from solver.search.options import SearchOptions
from solver.search.space import enumerate_layouts
from tests.search.problems import tiny_cluster, tiny_model, tiny_training

MODEL = tiny_model(8, 8, 2, 64, 4, True)            # 8 layers, 8 heads / 4 KV heads
# torchtitan ties the embedding and LM head at pp 1 only (solver.frameworks.models): its cases
# take the untied model so that pipelined layouts are in its space
UNTIED = MODEL.model_copy(update={"tied_embeddings": False})
CLUSTER = tiny_cluster(2, 4, 80)                     # 8 GPUs, 80 GB: memory never binds
OPTIONS = SearchOptions(max_vpp=4, max_cp=4, max_micro_batch=2, top_k=5, time_limit_s=30)

# (framework, rule, attention kernel, global batch in sequences)
CASES = [
    ("megatron-core", "zero_stage", "flash", 16),               # ZeRO-2/3 only without PP
    ("megatron-core", "context_parallel", "unfused", 16),       # CP needs TE fused attention
    ("megatron-core", "interleave_microbatches", "flash", 12),  # interleaved: M multiple of PP
    ("torchtitan", "zero_stage", "flash", 16),                  # no ZeRO-1 w/o PP, no ZeRO-2/3 with PP
    ("torchtitan", "zero0_with_cp", "flash", 16),               # FSDP shards over CP ranks
    ("torchtitan", "context_parallel", "unfused", 16),          # CP wraps SDPA / FlexAttention only
    ("torchtitan", "interleave_microbatches", "flash", 5),      # M multiple of max(1, M // PP)
    ("deepspeed", "zero_stage", "flash", 16),                   # pipeline engine: ZeRO 0/1
    ("deepspeed", "zero3_with_tp", "flash", 16),                # AutoTP: ZeRO 0/1/2
    ("deepspeed", "sequence_parallel", "flash", 16),            # no Megatron-style SP
    ("deepspeed", "context_parallel", "flash", 16),             # Ulysses, not ring CP
    ("deepspeed", "interleaving", "flash", 16),                 # TrainSchedule only
]


def _training(framework: str, kernel: str, batch_seqs: int):
    t = tiny_training(1024, batch_seqs)
    return t.model_copy(update={"framework": framework, "attention_kernel": kernel})


def _broken(training, layout) -> set[str]:
    fw = load_framework(training.framework)
    accum = rules.accumulation(training, layout.dp, layout.micro_batch)
    return {v.rule for v in violations(fw, kernel=training.attention_kernel, tp=layout.tp, pp=layout.pp,
                                       cp=layout.cp, vpp=layout.vpp, sp=layout.sequence_parallel,
                                       zero=layout.zero_stage, accum=accum)}


@pytest.fixture
def without_framework_rules(monkeypatch):
    """The structural space alone: every framework predicate of the search answers True."""
    def permissive():
        for name in ("framework_tensor_ok", "framework_pipeline_ok", "framework_context_ok",
                     "framework_shard_ok"):
            monkeypatch.setattr(rules, name, lambda *a, **k: True)
        monkeypatch.setattr(rules, "interleave_batch_ok", lambda *a, **k: True)
    return permissive


@pytest.mark.parametrize("framework, rule, kernel, batch", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_rule_excludes_layouts_in_search_and_oracle(framework, rule, kernel, batch, without_framework_rules):
    training = _training(framework, kernel, batch)
    model = UNTIED if framework == "torchtitan" else MODEL
    space = list(enumerate_layouts(model, CLUSTER, training, OPTIONS))
    assert space and not any(_broken(training, lo) for lo in space)  # the oracle's space obeys all rules
    best = exhaustive_search(model, CLUSTER, training, OPTIONS)[:OPTIONS.top_k]
    got = search_layouts(model, CLUSTER, training, OPTIONS, explain=False)
    assert not any(_broken(training, r.layout) for r in got.layouts)
    assert [round(r.objective_units) for r in got.layouts] == [round(e.objective_units) for e in best]
    without_framework_rules()
    raw = list(enumerate_layouts(model, CLUSTER, training, OPTIONS))
    assert any(rule in _broken(training, lo) for lo in raw), f"no layout breaks {rule}: the test is vacuous"
