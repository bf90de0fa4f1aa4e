"""Nothing fits: the answer is the reason and the smallest fix, found by the solver."""
import pytest

from solver.cost.estimate import estimate_layout, make_context
from solver.cost.step import compose_memory, memory_terms, usable_memory_bytes
from solver.errors import InfeasibleError
from solver.presets import load_model
from solver.search import search_layouts
from solver.search.options import SearchOptions
from solver.search.rules import accumulation
from solver.search.space import enumerate_layouts
from solver.specs import LayoutSpec, TrainingSpec
from tests.search.problems import tiny_cluster, tiny_model, tiny_training
from topology.catalog import load_cluster


@pytest.fixture(scope="module")
def llama405b_on_8():
    """Llama 3 405B (solver/data/models/llama3-405b.json) on one node of 8 x 80 GB GPUs."""
    model = load_model("llama3-405b")
    cluster = load_cluster("seed-512").model_copy(update={"nodes": 1})
    training = tiny_training(8192, 512, tokens=1e12)
    with pytest.raises(InfeasibleError) as err:
        search_layouts(model, cluster, training, {"top_k": 3})
    return model, cluster, training, err.value


def test_405b_on_8_gpus_says_why(llama405b_on_8):
    _, cluster, _, err = llama405b_on_8
    light = err.explanation["lightest_layout"]
    # 405B parameters x 12 bytes / 8 GPUs is about 608 GB of model state per GPU (seed recipe).
    assert light["memory_per_gpu_bytes"]["model_state"] > 600e9
    assert light["memory_per_gpu_bytes"]["total"] > light["usable_bytes"] == 0.9 * cluster.gpu.memory_bytes
    assert "lightest layout needs" in err.message


def test_405b_smallest_fix_is_more_gpus_and_it_is_minimal(llama405b_on_8):
    model, cluster, training, err = llama405b_on_8
    fix = next(f for f in err.explanation["fixes"] if f["change"] == "more_gpus")
    fields = {k: fix["layout"][k] for k in LayoutSpec.model_fields}
    bigger = cluster.model_copy(update={"nodes": fix["nodes"]})
    assert estimate_layout(model, bigger, training, LayoutSpec(**fields)).fits
    # Independent check with the cost model's own memory test: nothing on one node fewer fits.
    one_fewer = cluster.model_copy(update={"nodes": fix["nodes"] - 1})
    layouts = enumerate_layouts(model, one_fewer, training, SearchOptions(allow_fewer_gpus=True))
    ctx = make_context(model, one_fewer, training)
    limit = usable_memory_bytes(ctx)
    assert all(compose_memory(memory_terms(ctx, lo, accumulation(training, lo.dp, lo.micro_batch)))["total"]
               > limit for lo in layouts)
    assert set(err.explanation["no_fix_found"]) == {"shorter_sequence", "bigger_gpu"}


def test_excluded_zero_stage_is_offered_lightest_first():
    """1 layer, 1 head: only DP can use the 8 GPUs, so only ZeRO sharding shrinks the state.
    On 5.0 GB GPUs ZeRO-1 does not fit and ZeRO-2 does (cost model: 4.7 vs 4.2 GB of 4.5)."""
    model, training = tiny_model(1, 1, 1, 4096, 4, True), tiny_training(512, 8)
    cluster = tiny_cluster(1, 8, 5.0)
    with pytest.raises(InfeasibleError) as err:
        search_layouts(model, cluster, training, {"zero_stages": [0], "top_k": 1})
    fix = next(f for f in err.value.explanation["fixes"] if f["change"] == "allow_zero_stages")
    assert fix["value"] == 2 and fix["layout"]["zero_stage"] == 2
    assert search_layouts(model, cluster, training, {"zero_stages": [0, 2], "top_k": 1}).layouts


def test_structural_infeasibility_names_families_and_relaxation():
    """A batch of 1.2 sequences cannot be hit exactly: the batch family, fixed by a tolerance."""
    one = tiny_model(1, 1, 1, 64, 4, True)
    training = TrainingSpec(seq_len=512, global_batch_tokens=int(1.2 * 512), tokens=1e9)
    with pytest.raises(InfeasibleError) as err:
        search_layouts(one, tiny_cluster(1, 2, 80), training)
    ex = err.value.explanation
    assert ex["kind"] == "structure" and "batch" in ex["families"]
    assert {"change": "options", "set": {"batch_tolerance": 0.25}} in ex["fixes"]


def test_no_split_of_all_gpus_falls_back_instead_of_failing():
    """1 layer, 1 head, 1 sequence per step on 2 GPUs: only 1 GPU is usable, and it is said."""
    one = tiny_model(1, 1, 1, 64, 4, True)
    res = search_layouts(one, tiny_cluster(1, 2, 80), tiny_training(6, 1))
    assert res.gpus_used == [1] and res.gpus_available == 2 and "no layout uses all 2 GPUs" in res.fallback


def test_a_missed_deadline_is_not_called_a_memory_problem():
    model, training = tiny_model(4, 4, 1, 64, 4, True), tiny_training(1024, 16, tokens=1e9)
    cluster = tiny_cluster(2, 4, 80)
    with pytest.raises(InfeasibleError) as err:
        search_layouts(model, cluster, training,
                       {"objective": "min_gpus_deadline", "deadline_s": 1e-3, "top_k": 1})
    ex = err.value.explanation
    assert ex["kind"] == "deadline" and ex["fastest_run_s"] > 1e-3
    fast = ex["fixes"][0]["layout"]
    assert fast["fits"] and fast["gpus"] <= cluster.gpus
