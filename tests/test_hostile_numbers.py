"""Hostile inputs, second round (issue 19): no wrong number leaves with exit code 0.

Each command checks the finiteness and sign of what it prints; inputs whose numbers cannot be simulated stop
with one line naming the flag or file, exit code 2, no traceback.
"""
from __future__ import annotations

import pytest

from perfmodel.cli import main
from perfmodel.errors import InputError


def fails_with_one_line(argv, capsys, *words) -> str:
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert rc == 2, (rc, err, cap.out[-500:])
    assert err.startswith("perfmodel: error:") and "\n" not in err, err
    assert "Traceback" not in err
    for w in words:
        assert w.lower() in err.lower(), (w, err)
    return err


SERVE = ["serve", "--arch", "h200", "--model", "llama8b", "--requests", "50"]


# --- serve: length distributions and rates -----------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--isl-dist", "--osl-dist"])
@pytest.mark.parametrize("dist", ["lognormal:200:1e308", "lognormal:200:40", "20000000", "exponential:9e6",
                                  "normal:1e300:1"])
def test_serve_length_distribution_overflow(flag, dist, capsys):
    fails_with_one_line(SERVE + ["--rate", "5", flag, dist], capsys, flag)
    fails_with_one_line(SERVE + ["--concurrency", "4", flag, dist], capsys, flag)


def test_serve_draws_longer_than_the_context(capsys):
    fails_with_one_line(SERVE + ["--rate", "5", "--osl-dist", "lognormal:200:3.5"], capsys, "--osl-dist",
                        "context")
    fails_with_one_line(SERVE + ["--rate", "5", "--isl-dist", "normal:1e6:1e5"], capsys, "--isl-dist", "context")


@pytest.mark.parametrize("rate", ["1e-300", "5e-324", "1e-9"])
def test_serve_rate_too_low_for_finite_arrivals(rate, capsys):
    fails_with_one_line(SERVE + ["--rate", rate], capsys, "--rate")


def test_length_distribution_sampling_is_capped():
    import numpy as np

    from perfmodel.serve.workload import MAX_TOKENS, LengthDist, parse_dist

    with pytest.raises(InputError, match="cap"):
        LengthDist("lognormal", 200.0, 1e308, "x").sample(np.random.default_rng(0), 10, "--osl-dist")
    d = parse_dist("lognormal:200:2", field="--osl-dist")
    x = d.sample(np.random.default_rng(0), 1000, "--osl-dist")
    assert x.min() >= 1 and x.max() <= MAX_TOKENS


def test_serve_checks_every_number_it_prints(monkeypatch, capsys):
    """A simulation giving a negative or non-finite number is refused, not printed."""
    import perfmodel.serve.simulate as sim

    real = sim.simulate

    def bad(*a, **k):
        r = real(*a, **k)
        r["throughput_tok_s"] = -1.0
        return r

    monkeypatch.setattr(sim, "simulate", bad)
    fails_with_one_line(SERVE + ["--rate", "5"], capsys, "throughput_tok_s")

    def nan(*a, **k):
        r = real(*a, **k)
        r["duration_s"] = float("nan")
        return r

    monkeypatch.setattr(sim, "simulate", nan)
    fails_with_one_line(SERVE + ["--rate", "5", "--format", "json"], capsys, "duration_s")


# --- train: a hostile profile ------------------------------------------------------------------------------

TRAIN = ["train", "--arch", "h200", "--model", "llama8b", "--gpus", "8", "--global-batch", "64", "--seq", "4096"]


@pytest.mark.parametrize("body", ['{"gemm_overhead_s": 1e308}', '{"comm_base_s": 1e308}', '{"gemm_k0": 1e308}',
                                  '{"gemm_overhead_s": 1e300, "standalone_overhead_s": 1e300}'])
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_train_hostile_profile_is_refused_not_printed(body, fmt, tmp_path, capsys):
    """Before: 'step time inf s', 'pipeline bubble nan%', JSON step_time_s 0.0, exit 0. Now the profile is
    refused at load, its field out of any physical range (perfmodel.profile._range_problem)."""
    import json

    prof = tmp_path / "profile.json"
    prof.write_text(body)
    out = tmp_path / "t.json"
    fails_with_one_line(TRAIN + ["--calibration", prof, "--format", fmt, "--out", out], capsys, "profile.json",
                        next(iter(json.loads(body))))
    assert not out.exists()


def test_train_projection_check_accepts_a_normal_run(capsys):
    assert main(TRAIN) == 0
    assert "inf" not in capsys.readouterr().out


# --- sweep --vary: the scenario checks per grid point ------------------------------------------------------

SWEEP = ["sweep", "--arch", "h200", "--model", "llama8b"]


@pytest.mark.parametrize("vary, words", [
    ("tp=1,3", ("tp=3", "attention heads")),
    ("pp=1,64", ("pp=64", "layers")),
    ("osl=128,1000000000000", ("osl=1000000000000", "context")),
    ("ep=1,3", ("ep=3",)),
])
def test_sweep_refuses_grid_points_no_engine_runs(vary, words, tmp_path, capsys):
    """Before: tp=3 on 32 heads, pp=64 on 32 layers and osl=1e12 each a row, marked fits=True or given numbers."""
    out = tmp_path / "s.csv"
    fails_with_one_line(SWEEP + ["--vary", vary, "--out", out], capsys, "--vary", *words)
    assert not out.exists()


def test_sweep_marks_points_that_do_not_fit_memory(capsys):
    """A point that runs but does not fit stays, marked fits=False (sweeping memory to find where it stops)."""
    assert main(SWEEP + ["--vary", "hbm_bytes=1GB,141GB"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()
    assert rows[1].endswith(",False") and rows[2].endswith(",True")


def test_sweep_base_scenario_checked_too(capsys):
    fails_with_one_line(SWEEP + ["--vary", "batch=1,2", "--tp", "3"], capsys, "--tp", "attention heads")
