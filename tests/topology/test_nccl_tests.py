"""`trainplan cluster from-nccl-tests`: parsing nccl-tests all_reduce_perf output (fixtures in
tests/fixtures/nccl_tests/, written in nccl-tests 2.19's format: src/util.cu) into busbw."""
import json
from pathlib import Path

import pytest

from service.cli import main
from topology.catalog import load_cluster
from topology.errors import SpecError
from topology.nccl_tests import read_run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_tests"
INTRA = str(FIX / "all_reduce_perf_1node_8gpu.txt")
INTER = str(FIX / "all_reduce_perf_2node_16gpu.txt")
ONE_PER_NODE = str(FIX / "all_reduce_perf_4node_1gpu.txt")


def test_intra_node_plateau_by_hand():
    # Largest message 8 GiB; plateau rows >= 8 GiB / 16 = 512 MiB: 512M, 1G, 2G, 4G, 8G.
    # busbw out-of-place / in-place: 358.85 356.02, 359.34 361.14, 359.95 360.67,
    # 361.51 360.07, 362.48 359.60. Sorted, the middle two are 359.95 and 360.07: median 360.01.
    r = read_run(INTRA)
    assert (r.kind, r.ranks, r.hosts, r.ranks_per_host) == ("intra_node", 8, 1, 8)
    assert r.plateau_sizes_bytes == (2**29, 2**30, 2**31, 2**32, 2**33)
    assert r.busbw_gb_s == pytest.approx(360.01) and r.per_gpu_gb_s == pytest.approx(360.01)
    assert r.device == "NVIDIA H100 80GB HBM3"


def test_inter_node_per_gpu_by_hand():
    # 2 hosts x 8 ranks. Plateau busbw: 358.98 357.23, 359.79 362.64, 362.51 363.95,
    # 364.61 363.88, 366.58 364.76 -> median (362.64 + 363.88) / 2 = 363.26 GB/s. A ring's
    # cross-node traffic shares the node's 8 NICs: per GPU 363.26 / 8 = 45.4075 GB/s.
    r = read_run(INTER)
    assert (r.kind, r.ranks, r.hosts, r.ranks_per_host) == ("inter_node", 16, 2, 8)
    assert r.busbw_gb_s == pytest.approx(363.26) and r.per_gpu_gb_s == pytest.approx(45.4075)
    # One rank per host: busbw is the per-GPU figure. 46.18 45.82, 46.05 46.28, 46.03 46.13,
    # 46.19 46.00, 46.29 45.92 -> median (46.05 + 46.13) / 2 = 46.09.
    one = read_run(ONE_PER_NODE)
    assert (one.kind, one.ranks_per_host, one.per_gpu_gb_s) == ("inter_node", 1, pytest.approx(46.09))


def test_cli_prints_a_loadable_cluster(capsys, tmp_path):
    assert main(["cluster", "from-nccl-tests", INTRA, INTER, "--base", "dgx-h100-superpod",
                 "--name", "my-h100"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["intra_node"]["bandwidth_gb_s"] == 360.01 and out["inter_node"]["bandwidth_gb_s"] == 45.41
    assert out["nodes"] == 128 and out["intra_node"]["latency_us"] == 3  # kept from the base
    assert [m["kind"] for m in out["_measured"]] == ["intra_node", "inter_node"]
    path = tmp_path / "c.json"
    path.write_text(json.dumps(out))
    c = load_cluster(str(path))
    assert (c.name, c.intra_node.bandwidth_gb_s, c.inter_node.bandwidth_gb_s) == ("my-h100", 360.01, 45.41)


def test_largest_run_of_a_kind_wins(capsys):
    assert main(["cluster", "from-nccl-tests", ONE_PER_NODE, INTER, "--base", "seed-512"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["inter_node"]["bandwidth_gb_s"] == 45.41 and out["intra_node"]["bandwidth_gb_s"] == 450


def _mangle(tmp_path, text: str, name: str = "bad.txt") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


GOOD = Path(INTRA).read_text()


@pytest.mark.parametrize("text,reason", [
    ("", "no column header"),
    ("hello\nworld\n", "no column header"),
    (GOOD.split("     1048576")[0], "no result rows"),
    (GOOD.replace("Collective test starting: all_reduce_perf", "Collective test starting: alltoall_perf"),
     "is alltoall_perf output"),
    ("\n".join(line for line in GOOD.splitlines() if "Rank" not in line), "cannot tell an in-node run"),
    (GOOD.replace("  359.34       0", "  359.34      12"), "#wrong = 12"),
    (GOOD.replace("358.85", "abc"), "busbw 'abc' is not a number"),
    (GOOD.replace("358.85", "nan"), "not a finite"),
    (GOOD.replace("   536870912     134217728     float     sum      -1  2618.18  205.06  358.85       0",
                  "   536870912     134217728     float     sum      -1  2618.18  205.06"), "columns"),
    (GOOD.replace("Out of bounds values : 0 OK", "Out of bounds values : 3 FAILED"), "out-of-bounds"),
    (GOOD.replace("Pid 204751 on dgx-h100-001 device  7", "Pid 204751 on dgx-h100-002 device  7"),
     "uneven ranks per host"),
])
def test_malformed_files_exit_2_with_the_reason(tmp_path, capsys, text, reason):
    bad = _mangle(tmp_path, text)
    with pytest.raises(SpecError, match=reason):
        read_run(bad)
    assert main(["cluster", "from-nccl-tests", bad, "--base", "seed-512"]) == 2
    err = capsys.readouterr().err
    assert reason in err and bad in err and "Traceback" not in err


def test_unreadable_files_exit_2(tmp_path, capsys):
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["cluster", "from-nccl-tests", str(binary), "--base", "seed-512"]) == 2
    assert "not UTF-8" in capsys.readouterr().err
    assert main(["cluster", "from-nccl-tests", str(tmp_path / "missing.txt"), "--base", "seed-512"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_small_messages_warn(tmp_path, capsys):
    # Only rows up to 32 MiB: the plateau may not be reached; a warning, not an error.
    head, _, rest = GOOD.partition("    67108864")
    small = _mangle(tmp_path, head + "#" + rest.split("\n#", 1)[1])
    assert main(["cluster", "from-nccl-tests", small, "--base", "seed-512"]) == 0
    assert "may not have reached its plateau" in capsys.readouterr().err
