"""Bad specs give one clear problem per fault, each with its dotted field path."""
from typing import Any

import pytest

from solver.errors import SpecError, UnknownPresetError
from solver.presets import load_layout, load_model, load_training
from topology.catalog import load_cluster

MODEL = {"name": "m", "layers": 4, "hidden": 512, "ffn_hidden": 2048, "ffn_gated": True,
         "heads": 8, "kv_heads": 2, "head_dim": 64, "vocab": 1000, "tied_embeddings": True}
CLUSTER: dict[str, Any] = {"name": "c", "nodes": 2, "gpus_per_node": 8,
                           "gpu": {"name": "g", "memory_gb": 80, "peak_tflops": 1000, "hbm_gb_s": 3350},
                           "intra_node": {"bandwidth_gb_s": 450, "latency_us": 3},
                           "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}}
TRAINING = {"tokens": 1e9, "seq_len": 2048, "global_batch_tokens": 1048576}


def problems(loader, data):
    with pytest.raises(SpecError) as e:
        loader(data)
    return {p.field: p.reason for p in e.value.problems}


def test_valid_specs_load():
    assert load_model(MODEL).kv_heads == 2
    assert load_cluster(CLUSTER).gpus == 16
    assert load_training(TRAINING).assumed_mfu == 0.5


@pytest.mark.parametrize("change,field,words", [
    ({"kv_heads": 3}, "model.kv_heads", "divisible"),
    ({"layers": -1}, "model.layers", "greater than or equal to 1"),
    ({"hidden": 0}, "model.hidden", "greater than or equal to 1"),
    ({"vocab": 10**12}, "model.vocab", "less than or equal to"),
    ({"layers": "80"}, "model.layers", "valid integer"),
    ({"layers": 80.0}, "model.layers", "valid integer"),
    ({"ffn_gated": "yes"}, "model.ffn_gated", "valid boolean"),
    ({"norm": "batchnorm"}, "model.norm", "'rmsnorm' or 'layernorm'"),
    ({"width": 5}, "model.width", "unknown field"),
])
def test_model_problems(change, field, words):
    got = problems(load_model, {**MODEL, **change})
    assert list(got) == [field] and words in got[field]


def test_missing_and_many_problems_each_on_its_own_line():
    bad = {k: v for k, v in MODEL.items() if k != "heads"} | {"layers": 0, "extra": 1}
    got = problems(load_model, bad)
    assert got == {"model.heads": "required field is missing",
                   "model.layers": "Input should be greater than or equal to 1",
                   "model.extra": "unknown field"}


@pytest.mark.parametrize("change,field", [
    ({"nodes": 0}, "cluster.nodes"),
    ({"gpus_per_node": 2048}, "cluster.gpus_per_node"),
    ({"nodes": 100_000, "gpus_per_node": 200}, "cluster.nodes"),
    ({"gpu": {**CLUSTER["gpu"], "memory_gb": -80}}, "cluster.gpu.memory_gb"),
    ({"inter_node": {"bandwidth_gb_s": 45}}, "cluster.inter_node.latency_us"),
    ({"intra_node": {"bandwidth_gb_s": "fast", "latency_us": 3}}, "cluster.intra_node.bandwidth_gb_s"),
    ({"unavailable_nodes": [5]}, "cluster.unavailable_nodes"),
    ({"nvlink": True}, "cluster.nvlink"),
])
def test_cluster_problems(change, field):
    assert field in problems(load_cluster, {**CLUSTER, **change})


@pytest.mark.parametrize("change,field", [
    ({"seq_len": 0}, "training.seq_len"),
    ({"tokens": -5.0}, "training.tokens"),
    ({"global_batch_tokens": 1024}, "training.global_batch_tokens"),
    ({"assumed_mfu": 1.5}, "training.assumed_mfu"),
    ({"precision": {"weight_bytes": 0}}, "training.precision.weight_bytes"),
    ({"precision": {"fp8": True}}, "training.precision.fp8"),
])
def test_training_problems(change, field):
    assert field in problems(load_training, {**TRAINING, **change})


@pytest.mark.parametrize("data,field", [
    ({"tp": 1, "sequence_parallel": True}, "layout.sequence_parallel"),
    ({"pp": 1, "vpp": 2}, "layout.vpp"),
    ({"zero_stage": 4}, "layout.zero_stage"),
    ({"recompute": "some"}, "layout.recompute"),
    ({"tp": 0}, "layout.tp"),
    ({"tensor": 8}, "layout.tensor"),
])
def test_layout_problems(data, field):
    assert field in problems(load_layout, data)


def test_inline_layout_that_does_not_parse():
    assert "layout" in problems(load_layout, '{"tp": 8,')


def test_unknown_presets_list_the_known_ones():
    for loader, field, known in [(load_model, "model", "seed-70b"),
                                 (load_training, "training", "seed-300b"),
                                 (load_cluster, "cluster", "seed-512")]:
        with pytest.raises(UnknownPresetError) as e:
            loader("no-such-thing")
        (p,) = e.value.problems
        assert p.field == field and "no-such-thing" in p.reason and known in p.reason


def test_malformed_json_file(tmp_path):
    f = tmp_path / "model.json"
    f.write_text('{"layers": 80,,}')
    with pytest.raises(SpecError) as e:
        load_model(str(f))
    assert "not valid JSON" in str(e.value) and "line 1" in str(e.value)


def test_missing_file(tmp_path):
    with pytest.raises(SpecError) as e:
        load_cluster(str(tmp_path / "nope.json"))
    assert "cannot read" in str(e.value)
