"""The tune fitter and the held-out evaluation, on rows made here by the model itself (not measurements):
constants it was made with are recovered well enough to rank, held-out shapes never reach the fit, the
tune profile round-trips and is refused when broken, and queued-timing rows replace directly timed ones."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from perfmodel.errors import InputError
from perfmodel.profile import DEFAULTS
from perfmodel.spec import load_spec
from perfmodel.tune.constants import (TuneProfile, default_constants, find_tune_profile, load_tune_profile,
                                      parse_tune_profile, resolve_constants, save_tune_profile,
                                      tune_profile_document)
from perfmodel.tune.dataset import fold_of, is_held_out, load_measurements
from perfmodel.tune.evaluate import evaluate_directory
from perfmodel.tune.fit import fit_constants
from perfmodel.tune.rank import rank_gemm

ROOT = Path(__file__).resolve().parent.parent
HW = load_spec("h200")
TRUE = replace(default_constants(DEFAULTS), mma_eta_wgmma=0.7, l2_bytes_per_clk=8000.0, launch_s=6e-6)
SHAPES = [("a", 1, 4096, 4096), ("b", 16, 6144, 4096), ("c", 512, 4096, 4096), ("d", 2048, 4096, 4096),
          ("e", 64, 2560, 8192), ("f", 1024, 8192, 2048)]


def _rows(shapes=SHAPES, consts=TRUE, timing="queued") -> list[dict]:
    rows = []
    for name, m, n, k in shapes:
        r = rank_gemm(HW, DEFAULTS, m, n, k, "bf16", "reduced", consts)
        for p in r.ranked:
            rows.append({"id": f"gemm|{name}|{p.config.key}", "kind": "gemm", "shape_name": name,
                         "shape": {"m": m, "n": n, "k": k, "dtype": "bf16"}, "key": p.config.key, "grid": "reduced",
                         "time_s": p.time_s, "compile_s": 0.5, "bench_s": 0.01, "timing": timing})
    return rows


def _write(folder: Path, rows) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tune_measurements.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def test_split_is_deterministic_and_whole_shapes():
    keys = [f"gemm|s{i}" for i in range(300)]
    held = [k for k in keys if is_held_out(k, 1 / 3)]
    assert held == [k for k in keys if is_held_out(k, 1 / 3)]
    assert 70 < len(held) < 130
    assert {fold_of(k, 5) for k in keys} == set(range(5))


def test_fit_recovers_what_ranking_needs(tmp_path):
    data = load_measurements(_write(tmp_path, _rows()))
    fitted, info = fit_constants(data.shapes, HW, DEFAULTS)
    assert info["cost"] < info["cost_start"]
    assert info["log_error"]["gemm"]["median_abs"] < 0.02  # rows made by the model: it can reproduce them
    for name, m, n, k in SHAPES:
        truth = rank_gemm(HW, DEFAULTS, m, n, k, "bf16", "reduced", TRUE).ranked[0].time_s
        got = rank_gemm(HW, DEFAULTS, m, n, k, "bf16", "reduced", fitted).ranked[0]
        true_time = next(p.time_s for p in rank_gemm(HW, DEFAULTS, m, n, k, "bf16", "reduced", TRUE).ranked
                         if p.config == got.config)
        assert true_time <= truth * 1.02  # its first choice is within 2% of the best under the true constants


def test_held_out_shapes_never_reach_the_fit(tmp_path, monkeypatch):
    import perfmodel.tune.fit as fit

    seen = []
    real = fit.fit_constants

    def spy(entries, *a, **k):
        seen.append({e.key for e in entries})
        return real(entries, *a, **k)

    monkeypatch.setattr(fit, "fit_constants", spy)
    folder = _write(tmp_path / "run", _rows())
    tp, held = fit.fit_directory(folder, HW, DEFAULTS, holdout=0.4, folds=2)
    held_keys = set(tp.evidence["held_out_shapes"])
    assert held_keys and seen[0].isdisjoint(held_keys)
    assert {x["shape"] for x in held["shapes"]} == {k.split("|")[1] for k in held_keys}
    # k-fold: every fit misses the fold it is judged on
    assert tp.evidence["kfold"]["summary"]["complete_shapes"] == len(SHAPES)
    # the folder's evaluation judges the held-out shapes only, with the fitted constants
    save_tune_profile(tp, folder / "tune_profile.json")
    result = evaluate_directory(folder, HW, DEFAULTS)
    assert result["scope"]["judged"] == "held-out shapes only"
    assert {x["shape"] for x in result["shapes"]} == {k.split("|")[1] for k in held_keys}
    assert result["summary"]["hit_rate"] == 1.0


def test_tune_profile_round_trip_and_refusals(tmp_path):
    tp = TuneProfile("h200-sxm", "NVIDIA H200", TRUE, ("mma_eta_wgmma",), {"held_out_shapes": []})
    save_tune_profile(tp, tmp_path / "tune_profile.json")
    back = load_tune_profile(tmp_path)
    assert back.constants == TRUE and back.spec_key == "h200-sxm"
    doc = tune_profile_document(tp)
    for bad, field in (({**doc, "format": "x"}, "format"),
                       ({**doc, "constants": {"mma_eta_wgmma": 3.0}}, "constants.mma_eta_wgmma"),
                       ({**doc, "constants": {"mma_eta_wgmma": float("nan")}}, "constants.mma_eta_wgmma"),
                       ({**doc, "constants": {"warp_magic": 1.0}}, "constants"),
                       ({**doc, "spec_key": ""}, "spec_key")):
        with pytest.raises(InputError) as e:
            parse_tune_profile(bad, "p.json")
        assert "p.json" in str(e.value) and (field == "format" or field in str(e.value))


def test_ranking_uses_the_parts_tune_profile():
    c, source = resolve_constants(HW, DEFAULTS, None)
    tp = find_tune_profile(HW)
    if tp is None:
        assert source.startswith("estimates")
    else:
        assert c == tp.constants and "tune profile" in source
    c, source = resolve_constants(HW, DEFAULTS, "none")
    assert c == default_constants(DEFAULTS) and source.startswith("estimates")
    # another part has no tune profile: the estimates
    assert resolve_constants(load_spec("a100-sxm-80gb"), DEFAULTS, None)[1].startswith("estimates")


def test_queued_rows_replace_direct_ones(tmp_path):
    direct = _rows(SHAPES[:1], timing=None)
    for r in direct:
        r.pop("timing")
        r["time_s"] *= 3.0  # the host's launch time counted
    _write(tmp_path, direct)
    _write(tmp_path / "run2", _rows(SHAPES[:1]))
    data = load_measurements(tmp_path)
    assert data.superseded == len(direct) and len(data.shapes) == 1
    assert all(r.get("timing") == "queued" for r in data.shapes[0].rows.values())


def test_cli_fit_and_evaluate(tmp_path, capsys):
    from perfmodel.cli import main

    folder = _write(tmp_path / "run", _rows(SHAPES[:4]))
    r = subprocess.run([sys.executable, "-m", "perfmodel", "tune", "fit", str(folder), "--folds", "2",
                        "--holdout", "0.5", "--calibration", "none"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert (folder / "tune_profile.json").is_file() and "held out" in r.stdout
    # evaluate and a refusal in this process (the entry point is the one run above)
    capsys.readouterr()
    assert main(["tune", "evaluate", str(folder), "--calibration", "none", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["scope"]["judged"] == "held-out shapes only" and "kfold" in doc
    assert main(["tune", "fit", str(tmp_path / "nothing"), "--calibration", "none"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
