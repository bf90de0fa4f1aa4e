"""`search --framework megatron-core` on NVIDIA's DGXC recipes (benchmarks/dgxc_search.py runs
all 32): on a few of them the returned layouts break no Megatron-Core capability rule and
NVIDIA's own virtual-stage count is inside the search space."""
import pytest

from benchmarks.dgxc_search import FILES, dgxc_rows, problem, returned_violations, vpp_in_space
from solver.search import search_layouts

# GPT-3 175B (TP4 PP8 VPP12) and Nemotron-4 340B (TP8 PP8 VPP12): NVIDIA's 12 virtual stages,
# above the old cap of 8; Llama 3.1 405B (TP8 PP9 VPP7 CP2): context parallelism with interleaving.
IDS = ("dgxc_gpt3_175b_bf16_128", "dgxc_nemotron4_340b_bf16_256", "dgxc_llama31_405b_bf16_576")


@pytest.fixture(scope="module")
def rows(calibration_runs_path):
    by_id = {r["id"]: r for r in dgxc_rows(FILES)}
    assert len(by_id) == 32  # 8 calibration + 24 held-out DGXC problems
    return [by_id[i] for i in IDS]


def test_dgxc_search_returns_megatron_core_layouts_with_nvidia_vpp_in_space(rows):
    for row in rows:
        model, cluster, training, nvidia, options = problem(row)
        assert nvidia.vpp > 1 and vpp_in_space(model, cluster, training, options, nvidia.pp, nvidia.vpp), row["id"]
        res = search_layouts(model, cluster, training, {**options, "top_k": 5})
        assert res.layouts and all(r.layout.gpus == nvidia.gpus for r in res.layouts)
        assert all(r.estimate.framework == "megatron-core" for r in res.layouts)
        assert returned_violations(training, res.layouts) == [], row["id"]


def test_vpp_check_sees_a_capped_space(rows):
    # With the old cap of 8 virtual stages NVIDIA's VPP12 recipe falls outside the space.
    model, cluster, training, nvidia, options = problem(rows[0])
    assert nvidia.vpp == 12
    assert not vpp_in_space(model, cluster, training, {**options, "max_vpp": 8}, nvidia.pp, nvidia.vpp)
