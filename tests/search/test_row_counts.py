"""LayoutModel.row_counts (admission's table size, service.admission.table_size) counts what
pipeline_rows yields without building the rows: the same rows and row groups as enumerating
them, on MoE and dense problems, each framework, the search's and the plan's options."""
from __future__ import annotations

import pytest

from solver.layouts import default_plan_options
from solver.presets import load_model, load_training
from solver.search.api import plan_options
from solver.search.cpsat import LayoutModel
from solver.search.model import pipe_group
from solver.search.options import SearchOptions
from topology.catalog import load_cluster

HF = "tests/fixtures/hf"


@pytest.mark.parametrize("framework", ["megatron-core", "torchtitan", "deepspeed"])
@pytest.mark.parametrize("model,cluster,nodes", [
    (f"{HF}/mixtral-8x7b/config.json", "dgx-h100-superpod-rail-optimized", 32),
    (f"{HF}/qwen3-30b-a3b/config.json", "dgx-h100-superpod", 4),
    ("seed-70b", "seed-512", None)])
def test_row_counts_equal_the_enumeration(framework, model, cluster, nodes):
    spec, clu = load_model(model), load_cluster(cluster)
    if nodes is not None:
        clu = clu.model_copy(update={"nodes": nodes})
    training = load_training("seed-300b").model_copy(update={"framework": framework})
    for options in (SearchOptions(), plan_options(SearchOptions.model_validate(default_plan_options(clu)))):
        keys = list(LayoutModel(spec, clu, training, options).pipeline_rows())
        assert keys  # a count of 0 against 0 would prove nothing
        assert LayoutModel(spec, clu, training, options).row_counts() == (
            len(keys), len({pipe_group(k) for k in keys}))
