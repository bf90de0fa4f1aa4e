"""GPU and cluster presets added for issue 12: each loads, and its figures match the datasheet
numbers cited here (each preset's `_source` names the same document)."""
import pytest

from topology.catalog import PRESETS, load_cluster, load_gpu
from topology.generators import build_graph
from topology.spec import GpuSpec

# (preset, datasheet figures: memory GB, dense BF16 TFLOP/s, HBM GB/s, dense FP8 TFLOP/s)
DATASHEET = {
    # NVIDIA GB200 NVL72 specifications: per 72-GPU rack 360 PFLOPS BF16 and 720 PFLOPS FP8
    # with sparsity, 13.4 TB HBM3e at 576 TB/s -> per GPU 2,500 / 5,000 dense, 186 GB, 8 TB/s.
    "gb200": (186, 2500, 8000, 5000),
    # AMD Instinct MI300X: 192 GB HBM3, 5.3 TB/s, BF16 1,307.4 TFLOPS, FP8 2,614.9 (no sparsity).
    "mi300x-192gb": (192, 1307.4, 5300, 2614.9),
    # AMD Instinct MI325X: 256 GB HBM3E, 6 TB/s, same compute as MI300X.
    "mi325x-256gb": (256, 1307.4, 6000, 2614.9),
    # NVIDIA H100 / H200 SXM datasheets: BF16 1,979 and FP8 3,958 TFLOPS with sparsity.
    "h100-sxm-80gb": (80, 989, 3350, 1979),
    "h200-sxm-141gb": (141, 989, 4800, 1979),
    # NVIDIA H800 SXM: the H100 SXM's compute and HBM, NVLink 400 GB/s bidirectional.
    "h800-sxm-80gb": (80, 989, 3350, 1979),
    # HGX B200 (1,000 W): BF16 2,250 and FP8 4,500 TFLOPS dense; DGX B200: 1,440 GB / 8 GPUs.
    "b200": (180, 2250, 8000, 4500),
}


@pytest.mark.parametrize("name", sorted(DATASHEET))
def test_gpu_preset_matches_datasheet(name):
    gpu = load_gpu(name)
    assert (gpu.memory_gb, gpu.peak_tflops, gpu.hbm_gb_s, gpu.peak_fp8_tflops) == DATASHEET[name]
    raw = PRESETS.raw("gpus", name)
    assert raw["_source"]


def test_gb200_is_not_b200():
    assert load_cluster("gb200-nvl72-superpod").gpu == load_gpu("gb200") != load_gpu("b200")


@pytest.mark.parametrize("name,gpu,nvlink_busbw", [
    # DGX H200: NVLink 4, 450 GB/s per direction; 360 GB/s busbw assumed as for H100.
    ("dgx-h200-superpod", "h200-sxm-141gb", 360),
    # HGX B200: NVLink 5, 900 GB/s per direction; 720 GB/s busbw assumed (80%).
    ("hgx-b200-cluster", "b200", 720),
    ("gb200-nvl72-superpod", "gb200", 720),
    # DeepSeek-V3's 2,048 H800: NVLink 160 GB/s achieved (DeepSeek-V3 report sec. 3.2.2).
    ("h800-2048", "h800-sxm-80gb", 160),
])
def test_cluster_presets_load(name, gpu, nvlink_busbw):
    c = load_cluster(name)
    assert c.gpu == load_gpu(gpu) and c.intra_node.bandwidth_gb_s == nvlink_busbw
    raw = PRESETS.raw("clusters", name)
    assert raw["_source"] and raw["_assumed"]


@pytest.mark.parametrize("name", ["dgx-h100-superpod-rail-optimized", "dgx-a100-superpod-rail-optimized"])
def test_rail_optimized_presets_say_what_they_build(name):
    # These were named "...-fattree" but build the rail-optimized fabric (NIC r of every node
    # of a scalable unit to that unit's rail-r leaf): the name now says so.
    c = load_cluster(name)
    assert c.topology.kind == "rail_optimized"
    assert not any("fattree" in n for n in PRESETS.names("clusters"))
    g = build_graph(c)
    leaf_of_nic = {v: u for v in g if v.startswith("n0.nic") for u in g.successors(v) if u.startswith("su")}
    assert sorted(leaf_of_nic.values()) == [f"su0.rail{r}" for r in range(8)]


def test_fp8_peak_is_optional():
    assert load_gpu("a100-sxm-80gb").peak_fp8_tflops is None  # A100 has no FP8 tensor cores
    assert GpuSpec(name="x", memory_gb=80, peak_tflops=1000, hbm_gb_s=3000).peak_fp8_tflops is None
