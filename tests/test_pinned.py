"""Figures the README and docs state, pinned so a regression (or a stale committed file) fails.

- The committed H200 profile is what the current fitter makes of the committed measurements.
- docs/calibration-h200/README.md is what the docs generator makes of calibration/h200.
- The validation medians against published results stay within a point of what the README states.
"""
from __future__ import annotations

import json
import shutil

import pytest

from perfmodel.paths import repo_root

ROOT = repo_root()
CAL = ROOT / "calibration" / "h200"

# README "Validation against published results" (perfmodel validate): median |error| per metric, and every
# part's signed median for throughput, as measured when this was written; a regression of more than a point
# (or two for a part's signed median) fails.
# (issue 24: training moved from 0.041 to 0.079 when the fitted step-level power drop gave way to the H200's
# measured power-limited clock, carried to A100 and H100 by the energy carry's rule; docs/power-clock.md)
PINNED_MEDIANS = {"output_throughput_per_gpu": 0.102, "ttft": 0.152, "model_tflops_per_gpu": 0.079}


@pytest.mark.slow
def test_committed_profile_is_what_the_fitter_makes_of_the_measurements(tmp_path):
    from perfmodel.fit.directory import fit_directory

    d = tmp_path / "h200"
    d.mkdir()
    for name in ("measurements.jsonl", "environment.json"):
        shutil.copy(CAL / name, d / name)
    shutil.copytree(CAL / "clock-course", d / "clock-course")  # the power-limited clock's courses
    fit_directory(d)
    fresh = json.loads((d / "profile.json").read_text())
    committed = json.loads((CAL / "profile.json").read_text())
    # Least squares on a few degenerate parameters lands on slightly different optima on other CPUs and BLAS
    # builds (a tile constant traded against an efficiency), so the check is on what the profile predicts, not
    # on its digits: the same held-out error per class within a point, and the same time for every measured
    # shape within 2% at the median, 10% at worst. A stale profile (code or rows changed) fails it.
    assert fresh["attn_default"] == committed["attn_default"]
    for split in ("held_out", "train"):
        for cls, e in committed["validation"]["ops"][split].items():
            got = fresh["validation"]["ops"][split][cls]
            assert got["n"] == e["n"], (split, cls)
            assert abs(got["median_abs_error"] - e["median_abs_error"]) < 0.01, (split, cls)
    import numpy as np

    from perfmodel.fit.latency import load_cases, predict_cases
    from perfmodel.measure.store import read_rows
    from perfmodel.profile import load_profile
    from perfmodel.spec import load_spec

    cases, *_ = load_cases(read_rows(CAL / "measurements.jsonl"), 0.25, 0)
    hw = load_spec(committed["spec_key"])
    ratio = predict_cases(cases, hw, load_profile(d)) / predict_cases(cases, hw, load_profile(CAL))
    assert np.median(np.abs(ratio - 1)) < 0.02 and np.max(np.abs(ratio - 1)) < 0.10


def test_calibration_docs_are_regenerated_from_the_committed_fit(tmp_path, monkeypatch):
    from pathlib import Path

    from perfmodel.fit.docs import write_docs

    monkeypatch.chdir(ROOT)  # the document names the folder as the command was given: calibration/h200
    write_docs(Path("calibration/h200"), tmp_path)
    committed = (ROOT / "docs" / "calibration-h200" / "README.md").read_text()
    assert (tmp_path / "README.md").read_text() == committed, \
        "run: python -m perfmodel.fit.docs calibration/h200 docs/calibration-h200"


def test_validation_medians_do_not_regress():
    from perfmodel.validate import run_validation, summary

    rows = run_validation()
    s = summary(rows)
    assert s["refused"] == 0, [r["status"] for r in rows if r["status"].startswith("does not fit")]
    assert all(r["predicted"] is not None for r in rows), [r["id"] for r in rows if r["predicted"] is None]
    for metric, pinned in PINNED_MEDIANS.items():
        assert s["by_metric"][metric] <= pinned + 0.01, (metric, s["by_metric"][metric])
