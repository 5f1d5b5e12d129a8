"""Hostile inputs, second round (issue 19): text from inputs never reaches a terminal or a spreadsheet raw.

Control characters in a spec or model (names, keys, raw bytes) are refused once, at load, with one line; CSV
writers all go through the one escaping rule (:func:`perfmodel.io.csv_safe`).
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from perfmodel.cli import main

HOSTILE = Path(__file__).resolve().parent / "hostile"


def fails_with_one_line(argv, capsys, *words) -> str:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert rc == 2, (rc, err)
    assert err.startswith("perfmodel: error:") and "\n" not in err, err
    assert "Traceback" not in err and "\x1b" not in err and "\x00" not in err and "\r" not in err
    assert "\x1b" not in cap.out
    for w in words:
        assert w.lower() in err.lower(), (w, err)
    return err


@pytest.mark.parametrize("name, code", [("spec-esc-name.yaml", "U+001B"), ("spec-cr-name.yaml", "U+000D"),
                                        ("spec-raw-nul.yaml", "U+0000"), ("spec-raw-bell.yaml", "U+0007")])
def test_control_characters_in_a_spec_are_refused_at_load(name, code, tmp_path, capsys):
    """Before: the ESC reached the terminal and HTML raw and crashed the xlsx writers; a raw NUL gave a
    ReaderError traceback."""
    out = tmp_path / "r.xlsx"
    fails_with_one_line(["project", "--arch", HOSTILE / name, "--model", "llama8b"], capsys, name, code)
    fails_with_one_line(["export", "--arch", HOSTILE / name, "--model", "llama8b", "--out", out], capsys, code)
    assert not out.exists()


@pytest.mark.parametrize("name, code", [("model-ansi-key.yaml", "U+001B"), ("model-nul-name.yaml", "U+0000"),
                                        ("model-bidi-name.yaml", "U+202E")])
def test_control_characters_in_a_model_are_refused_at_load(name, code, capsys):
    fails_with_one_line(["project", "--arch", "h200", "--model", HOSTILE / name], capsys, name, code)


def test_control_characters_in_a_config_json_are_refused(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "llama", "name": "a\\u001b[31mb"}')
    fails_with_one_line(["project", "--arch", "h200", "--model", cfg], capsys, "U+001B")


def test_unknown_names_are_echoed_short_and_sanitised(capsys):
    err = fails_with_one_line(["project", "--arch", "h200", "--model", "evil\x1b[31mred\x07"], capsys, "unknown")
    assert "\x07" not in err
    fails_with_one_line(["project", "--arch", "evil\x1b[31mred", "--model", "llama8b"], capsys)


def test_a_system_file_as_model_or_spec_echoes_none_of_it(tmp_path, capsys):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secrethash:19000:0:99999:7:::\n")
    for argv in (["project", "--arch", "h200", "--model", secret], ["project", "--arch", secret, "--model", "llama8b"]):
        err = fails_with_one_line(argv, capsys)
        assert "secrethash" not in err


def test_trace_residuals_csv_escapes_formulas():
    """Before: an operator name from a trace starting with '=' went raw into the residuals CSV."""
    from perfmodel.trace.mapping import Row
    from perfmodel.trace.residuals import to_csv

    text = to_csv([Row('=HYPERLINK("http://evil","x")', "gemm", "layer", 1e-5, 2.0, 1.1e-5),
                   Row("+cmd|' /C calc'!A0", "gemm", "layer", 1e-5, 1.0, 0.9e-5)])
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[1][0].startswith("'=") and rows[2][0].startswith("'+")
    assert rows[1][-1] == "+0.1000" and rows[2][-1] == "-0.1000"  # numbers stay numbers


def test_validate_csv_escapes_a_hostile_id(tmp_path, capsys):
    src = Path(__file__).resolve().parent.parent / "workloads" / "validation" / "public_validation.csv"
    with open(src, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    head, row = rows[0], rows[1]
    row[head.index("id")] = '=HYPERLINK("http://evil","click")'
    table = tmp_path / "v.csv"
    with open(table, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([head, row])
    assert main(["validate", "--csv", str(table), "--format", "csv"]) == 0
    out = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert out[1][0].startswith("'=")


# --- writes before all checks pass (issue 19) ------------------------------------------------------------

TRAIN = ["train", "--arch", "h200", "--model", "llama8b", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]


def test_train_checks_every_output_before_writing_any(tmp_path, capsys):
    """Before: --report ok.html was written, then --export x.x failed."""
    ok, out = tmp_path / "ok.html", tmp_path / "o.txt"
    fails_with_one_line(TRAIN + ["--report", ok, "--export", tmp_path / "x.x", "--out", out], capsys, "--export",
                        ".xlsx")
    fails_with_one_line(TRAIN + ["--report", tmp_path / "ok.txt"], capsys, "--report", ".html")
    fails_with_one_line(TRAIN + ["--report", ok, "--export", tmp_path / "no" / "x.xlsx"], capsys, "--export",
                        "does not exist")
    fails_with_one_line(TRAIN + ["--report", ok, "--out", ok], capsys, "same file")
    fails_with_one_line(TRAIN + ["--export", tmp_path / "x.csv", "--out", tmp_path / "x-ops.csv"], capsys,
                        "same file")
    assert sorted(tmp_path.iterdir()) == []
    assert main([str(a) for a in TRAIN + ["--report", ok, "--export", tmp_path / "x.csv", "--out", out]]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"ok.html", "x.csv", "x-ops.csv", "o.txt"}


def test_out_may_not_overwrite_the_commands_own_input(tmp_path, capsys):
    root = Path(__file__).resolve().parent.parent
    prof = tmp_path / "profile.json"
    prof.write_bytes((root / "calibration" / "h200" / "profile.json").read_bytes())
    before = prof.read_bytes()
    spec = tmp_path / "my.yaml"
    spec.write_text("name: My H200\nextends: h200-sxm\n")
    for argv in (TRAIN + ["--calibration", prof, "--out", prof],
                 ["project", "--arch", "h200", "--model", "llama8b", "--calibration", prof, "--out", prof],
                 ["project", "--arch", spec, "--model", "llama8b", "--out", spec],
                 ["serve", "--arch", spec, "--model", "llama8b", "--rate", "5", "--requests", "20", "--out", spec]):
        fails_with_one_line(argv, capsys, "--out", "input")
    assert prof.read_bytes() == before and spec.read_text().startswith("name: My H200")
