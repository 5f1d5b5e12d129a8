"""The CPU quick suite end to end: measure, fit, project with the fitted profile."""
from __future__ import annotations

import math

import pytest

pytest.importorskip("torch")

from perfmodel.fit.directory import fit_directory  # noqa: E402
from perfmodel.measure.suite import run_suite  # noqa: E402
from perfmodel.profile import load_profile  # noqa: E402
from perfmodel.projection import project  # noqa: E402


def test_quick_suite_measure_fit_project(tmp_path):
    n = run_suite("cpu", "quick", tmp_path, progress=False,
                  only={"copy", "gemm", "attention", "rmsnorm", "swiglu", "residual", "instream", "layer", "launch"})
    assert n > 20
    # a CPU is no hardware spec of the library: fit it against one, the etas then describe the CPU
    report = fit_directory(tmp_path, spec="h200")
    assert "held_out" in report
    prof = load_profile(tmp_path)
    assert prof.fitted and prof.validation["ops"]
    p = project("h200", "llama8b", isl=128, osl=8, profile=prof)
    assert math.isfinite(p.tpot_s) and p.tpot_s > 0 and p.profile.fitted
    assert (tmp_path / "validation.json").is_file() and (tmp_path / "validation.md").is_file()
