"""Newcomer paths (issue 19): entry points that work outside the source tree, and a serve run that says when
it is overloaded."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(args, cwd, env_root=None):
    import os

    env = dict(os.environ)
    if env_root is not None:
        env["PERFMODEL_ROOT"] = str(env_root)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_train_validate_outside_the_source_tree(tmp_path):
    # an installed package's data folder (perfmodel/_data): hardware, workloads, calibration profiles
    data = tmp_path / "data"
    shutil.copytree(ROOT / "hardware", data / "hardware")
    (data / "workloads" / "validation").mkdir(parents=True)
    shutil.copy(ROOT / "workloads/validation/public_validation.csv", data / "workloads/validation")
    (data / "calibration").mkdir()
    r = _run(["-m", "perfmodel.train.validate", "--calibration", "none"], tmp_path, data)
    assert r.returncode == 0, r.stderr
    assert "megatron" in r.stdout and len(r.stdout.splitlines()) > 3


def test_train_validate_with_no_table_is_one_line(tmp_path):
    data = tmp_path / "empty"
    (data / "hardware").mkdir(parents=True)
    r = _run(["-m", "perfmodel.train.validate", "--calibration", "none"], tmp_path, data)
    assert r.returncode == 2 and r.stderr.startswith("perfmodel: error:") and "--csv" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout


def test_serve_says_when_overloaded(capsys):
    import json

    from perfmodel.cli import main

    over = ["serve", "--arch", "h200", "--model", "llama8b", "--rate", "500", "--requests", "600", "--isl", "2048",
            "--osl", "64"]
    assert main(over) == 0
    out = capsys.readouterr().out
    line = [x for x in out.splitlines() if x.startswith("overloaded:")]
    assert len(line) == 1 and "req/s offered" in line[0] and "req/s served" in line[0]
    assert main(over + ["--format", "json"]) == 0
    load = json.loads(capsys.readouterr().out)["load"]
    assert load["overloaded"] and load["served_req_s"] < 0.5 * load["offered_req_s"]


def test_serve_within_capacity_is_not_overloaded(capsys):
    import json

    from perfmodel.cli import main

    ok = ["serve", "--arch", "h200", "--model", "llama8b", "--rate", "2", "--requests", "200", "--isl", "512",
          "--osl", "64"]
    assert main(ok) == 0
    assert "overloaded" not in capsys.readouterr().out
    assert main(ok + ["--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["load"]["overloaded"] is False


def test_fit_of_a_cpu_calibration_says_why_not(tmp_path, capsys):
    import json

    from perfmodel.cli import main

    (tmp_path / "environment.json").write_text(json.dumps({"device": "cpu", "env": {"device_name": "AMD EPYC"}}))
    (tmp_path / "measurements.jsonl").write_text("")
    assert main(["fit", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfmodel: error:") and "\n" not in err
    assert "--device cpu" in err and "cannot be fitted" in err and "GPU" in err


def test_progress_only_on_a_terminal(monkeypatch, capsys):
    import io
    import time

    from perfmodel.cli.common import _Ticker, progress

    # the ticker's first line after 1 s and one every 0.2 s, scaled down (each wait below is past the first line)
    monkeypatch.setattr(_Ticker, "DELAY_S", 0.05)
    monkeypatch.setattr(_Ticker, "PERIOD_S", 0.01)
    with progress(3, "work") as tick:  # pytest's captured stderr is not a terminal
        tick()
        time.sleep(0.2)
    assert capsys.readouterr().err == ""

    class Term(io.StringIO):
        def isatty(self):
            return True

    term = Term()
    monkeypatch.setattr("sys.stderr", term)
    with progress(3, "work") as tick:
        tick()
        time.sleep(0.4)
    text = term.getvalue()
    assert "work: 1/3 (33%)" in text and text.endswith("\r\x1b[K")
    term2 = Term()
    monkeypatch.setattr("sys.stderr", term2)
    monkeypatch.setenv("PERFMODEL_PROGRESS", "0")
    with progress(None, "off"):
        time.sleep(0.2)
    assert term2.getvalue() == ""
