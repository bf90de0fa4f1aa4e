"""When no layout can use every GPU: the largest usable counts, searched exactly and reported."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from solver.errors import SpecError
from solver.search import exhaustive_search, search_layouts
from solver.search.fallback import NEAR_FRACTION, usable_gpu_counts
from solver.search.options import SearchOptions
from solver.search.space import enumerate_layouts
from solver.search.ties import rank_with_ties
from tests.search.problems import models, tiny_cluster, tiny_model, tiny_training

SMALL = {"max_micro_batch": 2, "max_vpp": 2, "max_cp": 2, "time_limit_s": 30}


def brute_counts(model, cluster, training, options):
    """Every count below the target with a structurally valid layout (plain enumeration)."""
    wide = options.model_copy(update={"allow_fewer_gpus": True})
    return sorted({lo.gpus for lo in enumerate_layouts(model, cluster, training, wide)
                   if lo.gpus < cluster.available_gpus}, reverse=True)


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow])
@given(models, st.integers(1, 13), st.sampled_from([1, 2, 4]), st.sampled_from([1, 3, 6, 8, 12]))
def test_usable_counts_equal_enumeration(model, nodes, gpn, batch_seqs):
    cluster, training = tiny_cluster(nodes, gpn, 80), tiny_training(512, batch_seqs)
    options = SearchOptions(**SMALL)
    every = brute_counts(model, cluster, training, options)
    near = [c for c in every if c >= (1 - NEAR_FRACTION) * cluster.available_gpus]
    assert usable_gpu_counts(model, cluster, training, options, limit=1000) == (near or every[:1])


def test_seven_gpus_fall_back_to_six_and_match_the_oracle():
    """7 GPUs, one per node, 8-sequence batch: dp in {1, 2, 4, 8} and pp <= 4 layers, so no
    layout uses 7 GPUs; 6 (pp 3 x dp 2) is the largest usable count."""
    model = tiny_model(4, 8, 2, 64, 4, True)
    cluster, training = tiny_cluster(7, 1, 80), tiny_training(512, 8)
    res = search_layouts(model, cluster, training, {"top_k": 3, **SMALL})
    assert res.gpus_available == 7 and res.gpus_used == [6] and "no layout uses all 7 GPUs" in res.fallback
    oracle = exhaustive_search(model, cluster, training, SearchOptions(gpus=6, **SMALL))
    assert [r.objective_units for r in res.layouts] == pytest.approx(
        [e.objective_units for e in oracle[:3]], rel=1e-12)
    assert res.status == "OPTIMAL" and res.as_dict()["search"]["gpus_used"] == [6]


def test_counts_near_the_target_are_merged_by_step_time(monkeypatch):
    """42 GPUs (21 nodes x 2), 5 layers, 6-sequence batch: no split of 42 (7 | 42 but
    pp <= 5, dp | 6, tp | 2, cp <= 2); with a 30% window the counts 40, 36, 32, 30 are each
    searched and merged (oracle: each count exhaustively)."""
    import solver.search.fallback as fallback

    monkeypatch.setattr(fallback, "NEAR_FRACTION", 0.3)
    model = tiny_model(5, 8, 2, 64, 4, True)
    cluster, training = tiny_cluster(21, 2, 80), tiny_training(512, 6)
    options = SearchOptions(top_k=6, **SMALL)
    counts = usable_gpu_counts(model, cluster, training, options)
    assert counts == [40, 36, 32, 30]
    res = search_layouts(model, cluster, training, options)
    assert res.fallback and res.status == "OPTIMAL" and set(res.gpus_used) <= set(counts)
    union = [e.objective_units for e in rank_with_ties(  # the tie rule over the merged counts
        [e for g in counts
         for e in exhaustive_search(model, cluster, training, options.model_copy(update={"gpus": g}))],
        options.objective)[0]]
    assert [r.objective_units for r in res.layouts] == pytest.approx(union[:6], rel=1e-12)


def test_gpus_option_fixes_the_count_and_is_checked(seed_model, seed_cluster, seed_training):
    res = search_layouts(seed_model, seed_cluster, seed_training, {"top_k": 2, "gpus": 256})
    assert res.gpus_used == [256] and res.fallback is None
    with pytest.raises(SpecError) as err:
        search_layouts(seed_model, seed_cluster, seed_training, {"gpus": 1024})
    assert err.value.problems[0].field == "options.gpus"


def test_cli_takes_gpus_and_split_stages(capsys):
    import json

    from service.cli import main

    args = ["search", "--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b", "--top", "1",
            "--gpus", "384", "--split-stages", "--format", "json"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    best = out["layouts"][0]
    assert out["search"]["gpus_used"] == [384] and out["search"]["gpus_available"] == 512
    assert best["pp"] == 1 or sum(best["pipeline_layers"]) == 80


def test_cli_split_stages_is_opt_in(capsys):
    """split_stages is off by default (SearchOptions and the CLI, for latency); --split-stages
    charges each stage separately and the layouts carry their split."""
    import json

    from service.cli import main

    base = ["search", "--model", "gpt3-175b", "--cluster", "seed-512", "--training", "seed-300b", "--top", "2",
            "--format", "json"]
    got = {}
    for flag in ([], ["--split-stages"]):
        assert main(base + flag) == 0
        got[bool(flag)] = json.loads(capsys.readouterr().out)["layouts"]
    assert all(d["pp"] > 1 for d in got[False] + got[True])  # GPT-3's best layouts are pipelined
    assert all(sum(d["pipeline_layers"]) == 96 for d in got[True])
    assert all(d["pipeline_layers"] is None for d in got[False])
