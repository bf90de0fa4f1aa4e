"""The default search space holds every virtual-stage count and micro-batch the rules admit.

NVIDIA's DGXC recipes (GPT-3 175B and Nemotron-4 340B: 96 layers, PP8 x VPP12; Llama 3.1
405B: 126 layers, PP9 x VPP7) must be inside the default space, not cut off by a cap.
"""
import json
from pathlib import Path

from solver.presets import load_model, load_training
from solver.search.options import SearchOptions
from solver.search.rules import batch_ok, pipeline_ok
from solver.search.space import domains, enumerate_layouts, micro_batches
from solver.specs import LayoutSpec, ModelSpec, TrainingSpec
from topology.catalog import load_cluster

HELDOUT = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "heldout_runs.jsonl"


def _rows(path):
    return [json.loads(t) for t in Path(path).read_text().splitlines() if t.strip()]


def test_every_dgxc_recipe_layout_is_in_the_default_space(calibration_runs_path):
    rows = [r for p in (calibration_runs_path, HELDOUT) for r in _rows(p) if r["id"].startswith("dgxc_")]
    vpps = set()
    for r in rows:
        model, cluster = load_model(r["model"]), load_cluster(r["cluster"])
        training, lo = load_training(r["training"]), LayoutSpec(**r["layout"])
        d = domains(model, cluster, training, SearchOptions())
        assert lo.vpp in d.vpp and lo.micro_batch in d.micro_batch and lo.dp in d.dp, r["id"]
        assert pipeline_ok(model, SearchOptions(), lo.pp, lo.vpp), r["id"]
        vpps.add(lo.vpp)
    assert 12 in vpps  # GPT-3 175B / Nemotron-4 340B, beyond the old cap of 8


def test_vpp_domain_reaches_every_count_the_pipeline_rule_admits():
    # seed 70B: 80 layers; pp = 2 admits vpp | 40, so up to 40 (chunks of two layers at vpp 20,
    # one layer at 40); no count is missing from 1 .. 40 that pipeline_ok admits for some pp.
    model, cluster, training = load_model("seed-70b"), load_cluster("seed-512"), load_training("seed-300b")
    d = domains(model, cluster, training, SearchOptions())
    admitted = {v for v in range(1, 81) for p in d.pp if pipeline_ok(model, SearchOptions(), p, v)}
    assert set(d.vpp) == admitted and max(d.vpp) == 40
    capped = domains(model, cluster, training, SearchOptions(max_vpp=8))
    assert max(capped.vpp) == 8


def test_micro_batch_domain_is_every_one_the_batch_rule_admits():
    # 64 sequences of 4096 tokens: with dp = 1 every divisor of 64 is a micro-batch (accumulation
    # 64 / mb), so 16, 32 and 64 (beyond the old cap of 8) are in; 3 is not (64 / 3 is not whole).
    tiny = ModelSpec(name="t", layers=4, hidden=256, ffn_hidden=1024, heads=4, kv_heads=4,
                     head_dim=64, vocab=1000, ffn_gated=True, tied_embeddings=False)
    training = TrainingSpec(seq_len=4096, global_batch_tokens=64 * 4096)
    assert micro_batches(training, SearchOptions(), 1) == [1, 2, 4, 8, 16, 32, 64]
    assert micro_batches(training, SearchOptions(), 8) == [1, 2, 4, 8]
    assert micro_batches(training, SearchOptions(max_micro_batch=4), 1) == [1, 2, 4]
    cluster = load_cluster("seed-512").model_copy(update={"nodes": 1})
    mbs = {lo.micro_batch for lo in enumerate_layouts(tiny, cluster, training, SearchOptions())}
    assert {16, 32, 64} <= mbs and 3 not in mbs
    # every micro-batch the rule admits for some dp is in the domain, none other
    d = domains(tiny, cluster, training, SearchOptions())
    assert set(d.micro_batch) == {m for dp in d.dp for m in range(1, 65) if batch_ok(training, SearchOptions(), dp, m)}


def _memory_answers(model, cluster, training, options):
    """(least memory of any layout, fewest GPUs of a fitting layout) over the whole space."""
    from solver.cost.estimate import make_context
    from solver.cost.step import compose_memory, memory_terms, usable_memory_bytes
    from solver.search.rules import accumulation

    ctx = make_context(model, cluster, training)
    least, fewest = None, None
    for lo in enumerate_layouts(model, cluster, training, options):
        total = compose_memory(memory_terms(ctx, lo, accumulation(training, lo.dp, lo.micro_batch)))["total"]
        least = total if least is None else min(least, total)
        if total <= usable_memory_bytes(ctx):
            fewest = lo.gpus if fewest is None else min(fewest, lo.gpus)
    return least, fewest


from hypothesis import given, settings  # noqa: E402

from tests.search.problems import binding_cluster, models, shapes, trainings  # noqa: E402


@settings(max_examples=25, deadline=None, derandomize=True)
@given(models, shapes, trainings)
def test_memory_questions_may_drop_interleaving_and_larger_micro_batches(model, shape, training):
    """explain.memory_question_options narrows the space of the memory-only questions (the
    lightest layout, the fewest GPUs that fit) to vpp 1 and micro-batch 1: the answers are
    the same as over every layout (its docstring has the argument)."""
    from solver.search.explain import memory_question_options

    nodes, per_node, share = shape
    cluster = binding_cluster(model, nodes, per_node, share)
    full = SearchOptions(allow_fewer_gpus=True)
    assert _memory_answers(model, cluster, training, memory_question_options(full)) == \
        _memory_answers(model, cluster, training, full)
