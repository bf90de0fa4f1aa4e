"""Input hardening on the command line (issue 12): every bad input is one clear line on
stderr and exit 2, never a traceback, a misread argument or a silent change."""
import json

import pytest

from service.cli import main

EST = ["estimate", "--model", "seed-70b", "--cluster", "seed-512", "--training", "seed-300b"]
LAYOUT = '{"tp": 8, "dp": 64, "zero_stage": 1, "sequence_parallel": true, "recompute": "selective"}'


def run(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_non_utf8_model_file_is_an_error_not_a_traceback(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_bytes(b"\xff\xfe{\x00}\x00")  # UTF-16 with a BOM: not UTF-8
    code, _, err = run(capsys, ["estimate", "--model", str(bad), "--cluster", "seed-512",
                                "--training", "seed-300b", "--layout", LAYOUT])
    assert code == 2
    assert err.startswith("error: model: ") and "not UTF-8" in err and "Traceback" not in err


def test_a_json_list_layout_is_read_as_json_and_refused_as_not_an_object(capsys):
    code, _, err = run(capsys, [*EST, "--layout", "[8,64]"])
    assert code == 2
    assert "cannot read" not in err
    assert err.startswith("error: layout: expected a JSON object") and "got a JSON list" in err


def test_a_directory_is_reported_as_a_directory_not_an_unknown_preset(capsys, tmp_path, monkeypatch):
    (tmp_path / "mymodel").mkdir()
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, ["plan", "--model", "mymodel", "--cluster", "seed-512"])
    assert code == 2
    assert "unknown preset" not in err and "Is a directory" in err


def test_a_preset_name_still_wins_over_a_directory_of_the_same_name(capsys, tmp_path, monkeypatch):
    (tmp_path / "seed-70b").mkdir()
    monkeypatch.chdir(tmp_path)
    code, _, _ = run(capsys, [*EST, "--layout", LAYOUT])
    assert code == 0


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_finite_numbers_not_range_errors(capsys, tmp_path, literal):
    path = tmp_path / "t.json"
    path.write_text(f'{{"tokens": {literal}, "seq_len": 8192, "global_batch_tokens": 4194304}}')
    code, _, err = run(capsys, ["plan", "--model", "seed-70b", "--cluster", "seed-512",
                                "--training", str(path)])
    assert code == 2
    assert err.startswith("error: training.tokens: not a finite number")
    assert "less than" not in err and "greater than" not in err


def test_nan_in_an_inline_layout_is_refused(capsys):
    code, _, err = run(capsys, [*EST, "--layout", '{"tp": 8, "dp": NaN}'])
    assert code == 2 and "layout.dp" in err


def test_cluster_accepts_inline_json_like_layout(capsys):
    cluster = {"name": "inline-8", "nodes": 1, "gpus_per_node": 8, "gpu": "h100-sxm-80gb",
               "intra_node": {"bandwidth_gb_s": 450, "latency_us": 3},
               "inter_node": {"bandwidth_gb_s": 45, "latency_us": 10}}
    code, out, err = run(capsys, ["estimate", "--model", "llama3-8b", "--cluster", json.dumps(cluster),
                                  "--training", "seed-300b", "--layout", '{"tp": 8}', "--format", "json"])
    assert code == 0, err
    assert json.loads(out)["gpus"] == 8


def test_inline_cluster_that_does_not_parse_names_the_field(capsys):
    code, _, err = run(capsys, [*EST[:3], "--cluster", '{"nodes": 1,', "--training", "seed-300b",
                                "--layout", LAYOUT])
    assert code == 2 and err.startswith("error: cluster: inline JSON does not parse")


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_validate_on_an_empty_file_exits_2_with_a_message(capsys, tmp_path, content):
    path = tmp_path / "cases.jsonl"
    path.write_text(content)
    code, out, err = run(capsys, ["validate", str(path)])
    assert code == 2 and out == ""
    assert err.startswith("error: cases: ") and "no cases" in err
