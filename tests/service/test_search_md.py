"""The ranked-layout Markdown tables (`search --format md` and the plan) carry a GPUs column."""
from __future__ import annotations

from service.cli import main
from service.render_md import layout_gpus

SEED = ["--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b"]


def _table(md: str, first: str) -> list[list[str]]:
    """Cells of the Markdown table whose header starts with column `first`."""
    lines = md.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"| {first} |"))
    rows = []
    for ln in lines[start:]:
        if not ln.startswith("|"):
            break
        if not ln.startswith("|---"):
            rows.append([c.strip() for c in ln.strip("|").split("|")])
    return rows


def test_layout_gpus_prefers_the_field():
    lay = {"tp": 8, "pp": 2, "dp": 4, "cp": 2}
    assert layout_gpus(lay) == 128 and layout_gpus({**lay, "gpus": 96}) == 96
    assert layout_gpus({"tp": 8, "pp": 1, "dp": 64}) == 512  # cp absent counts as 1


def test_search_md_has_gpus_column(capsys):
    """Seed: 64 nodes x 8 GPUs; the fastest layout (TP8 DP64) uses all 512."""
    assert main(["search", *SEED, "--top", "2", "--format", "md"]) == 0
    head, first, *_ = _table(capsys.readouterr().out, "rank")
    assert head[:2] == ["rank", "GPUs"] and first[:2] == ["1", "512"]
    col = {name: first[i] for i, name in enumerate(head)}
    assert int(col["TP"]) * int(col["PP"]) * int(col["DP"]) * int(col["CP"]) == 512


def test_search_md_min_gpus_shows_fewer_gpus(capsys):
    assert main(["search", *SEED, "--top", "2", "--objective", "min_gpus", "--format", "md"]) == 0
    head, *rows = _table(capsys.readouterr().out, "rank")
    for r in rows:
        col = dict(zip(head, r, strict=True))
        assert int(col["GPUs"]) == int(col["TP"]) * int(col["PP"]) * int(col["DP"]) * int(col["CP"])
        assert int(col["GPUs"]) < 512  # min_gpus on the seed uses far fewer than the cluster


def test_plan_md_ranked_table_has_gpus(capsys):
    assert main(["plan", *SEED, "--format", "md"]) == 0
    head, first, *_ = _table(capsys.readouterr().out, "rank")
    assert head[:3] == ["rank", "GPUs", "layout"] and first[:2] == ["1", "512"]
