"""The compute-communication overlap model: invariants, closed forms, the Excel path, the windows a step's
collectives hide under, and the fit to overlap rows."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.cost import time_ops
from perfmodel.cost.backend import XL, Expr
from perfmodel.cost.overlap import (METHODS, PARAMS, check_params, corun, exposed_comm, exposed_runs, fit_overlap,
                                    overlap_params, overlap_windows, pipeline, resolve_method)
from perfmodel.errors import InputError
from perfmodel.graph import Step, build_ops
from perfmodel.models import load_model
from perfmodel.ops import COMM_KINDS
from perfmodel.profile import DEFAULTS
from perfmodel.scenario import Scenario
from perfmodel.spec import load_spec

GRID_T = [0.0, 1e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
GRID_C = [2e-6, 1e-5, 1e-4, 1e-3, 1e-2]


def _profiles():
    """The defaults and random parameter sets where overlapping is never slower than serial (s (1 + i) <= 1)."""
    rng = np.random.default_rng(7)
    out = [DEFAULTS]
    for _ in range(12):
        s = float(rng.uniform(0.01, 0.6))
        i = min(float(rng.uniform(0.0, 1.0 / s - 1.0)), 3.0)
        out.append(DEFAULTS.with_(overlap={"sm_share": s, "interference": i,
                                           "chunk_overhead_s": float(rng.uniform(0, 2e-5)),
                                           "fused_sm_share": float(rng.uniform(0, 0.3)),
                                           "fused_interference": float(rng.uniform(0, 1.0)),
                                           "chunk_alpha_s": float(rng.uniform(0, 3e-5))}))
    return out


@pytest.mark.parametrize("method", [m for m in METHODS if m != "fixed"])
def test_exposed_never_exceeds_the_collective_and_never_grows_with_compute(method):
    for prof in _profiles():
        for c in GRID_C:
            prev = None
            for t in GRID_T:
                exposed, slow = exposed_comm(c, t, method, prof, chunks=4)
                assert -1e-15 <= exposed <= c * (1 + 1e-12), (method, prof.overlap, c, t)
                assert slow >= -1e-15
                if prev is not None:
                    assert exposed <= prev * (1 + 1e-9) + 1e-18, (method, prof.overlap, c, t)
                prev = exposed
                if method == "none":
                    assert exposed == c and slow == 0.0
                if method in ("stream", "decomposed"):  # overlap never costs more than running serially
                    assert exposed + slow <= c * (1 + 1e-9)


def test_fixed_fraction_keeps_the_old_meaning():
    assert exposed_comm(1e-3, 5e-3, "fixed", DEFAULTS, fraction=0.3) == pytest.approx((0.7e-3, 0.0))
    assert resolve_method(0.3) == ("fixed", 0.3)
    assert resolve_method("0.5") == ("fixed", 0.5)
    assert resolve_method(0) == ("none", 0.0)
    assert resolve_method("stream") == ("stream", 0.0)
    for bad in ("sometimes", 1.5, -0.1, True):
        with pytest.raises(InputError) as e:
            resolve_method(bad)
        assert "--overlap" in str(e.value)


def test_stream_closed_forms():
    prof = DEFAULTS.with_(overlap={"sm_share": 0.2, "interference": 0.1})
    # the collective finishes first: compute slowed by s for the collective's (stretched) duration
    exposed, slow = exposed_comm(0.5, 1.0, "stream", prof)
    assert exposed == 0.0 and slow == pytest.approx(0.2 * 0.5 * 1.1)
    # the compute finishes first: the collective's rest shows
    exposed, slow = exposed_comm(1.0, 0.2, "stream", prof)
    assert slow == pytest.approx(0.2 / 0.8 - 0.2)
    assert exposed == pytest.approx(1.0 - 0.25 / 1.1)
    # no SM share and no interference: perfect overlap of the shorter under the longer
    ideal = DEFAULTS.with_(overlap={"sm_share": 0.0, "interference": 0.0})
    assert exposed_comm(1.0, 0.4, "stream", ideal) == pytest.approx((0.6, 0.0))


def test_decomposed_pipeline():
    prof = DEFAULTS.with_(overlap={"sm_share": 0.0, "interference": 0.0, "chunk_overhead_s": 0.0})
    # long compute: only the last chunk's collective shows (alpha paid by each chunk)
    exposed, slow = exposed_comm(1e-3, 1e-2, "decomposed", prof, chunks=4, comm_alpha_s=1e-5)
    assert exposed == pytest.approx((1e-3 - 1e-5) / 4 + 1e-5) and slow == pytest.approx(0.0)
    # long collective: all but the first chunk's compute hides it
    span, exp = pipeline(1e-3, 1e-2, 4, 0.0, 0.0, 0.0, 0.0)
    assert span == pytest.approx(1e-3) and exp == pytest.approx(1e-2 - 3 * 1e-3 / 4)
    # latency-bound collective: what splitting saves is less than the chunks' GEMM overhead: not decomposed
    chunky = DEFAULTS.with_(overlap={"sm_share": 0.0, "interference": 0.0, "chunk_overhead_s": 5e-6})
    assert exposed_comm(1.2e-5, 1e-3, "decomposed", chunky, chunks=8, comm_alpha_s=1e-5) == pytest.approx((1.2e-5, 0.0))
    # more chunks hide more of a bandwidth-bound collective
    e2 = exposed_comm(1e-3, 1e-2, "decomposed", prof, chunks=2, comm_alpha_s=0.0)[0]
    e8 = exposed_comm(1e-3, 1e-2, "decomposed", prof, chunks=8, comm_alpha_s=0.0)[0]
    assert e8 < e2
    # the chunks' GEMM overhead shows as compute slowdown
    costly = DEFAULTS.with_(overlap={"sm_share": 0.0, "interference": 0.0, "chunk_overhead_s": 1e-5})
    assert exposed_comm(1e-3, 1e-2, "decomposed", costly, chunks=4, comm_alpha_s=0.0)[1] == pytest.approx(3e-5)


def test_fused_hides_more_than_decomposed_with_the_defaults():
    for c, t in ((1e-3, 2e-3), (5e-4, 5e-4), (2e-3, 1e-3)):
        f = sum(exposed_comm(c, t, "fused", DEFAULTS))
        d = sum(exposed_comm(c, t, "decomposed", DEFAULTS, chunks=4))
        assert f < d <= c


def test_arrays_and_excel_formulas_give_the_same_numbers():
    ts = np.array(GRID_T)
    for method in METHODS:
        ex, sl = exposed_comm(1e-3, ts, method, DEFAULTS, fraction=0.25, chunks=4)
        one = [exposed_comm(1e-3, float(t), method, DEFAULTS, fraction=0.25, chunks=4) for t in ts]
        assert np.allclose(ex, [o[0] for o in one]) and np.allclose(sl, [o[1] for o in one])

    def excel_eval(expr, cells):
        return eval(str(expr).replace("^", "**"), {"IF": lambda c, a, b: a if c else b, "MAX": max, "MIN": min,
                                                     "TRUE": True, "FALSE": False, **cells})

    for method in METHODS:
        for c, t in ((1e-3, 2e-3), (1e-3, 2e-4), (2e-5, 1e-3)):
            ex, sl = exposed_comm(Expr("CC"), Expr("TT"), method, DEFAULTS, fraction=0.25, chunks=4, xp=XL)
            want = exposed_comm(c, t, method, DEFAULTS, fraction=0.25, chunks=4)
            got = (excel_eval(ex, {"CC": c, "TT": t}), excel_eval(sl, {"CC": c, "TT": t}))
            assert got == pytest.approx(want, abs=1e-15), method


def _timed_step(tp=8, model="llama-3.1-70b"):
    hw = load_spec("h200")
    m = load_model(model)
    sc = Scenario(tp=tp).for_hardware(hw)
    ops = build_ops(m, Step("prefill", 1, 4096, 0), sc)
    return hw, time_ops(ops, hw, DEFAULTS, world=tp)


def test_windows_pair_each_collective_with_its_gemm():
    hw, times = _timed_step()
    win = overlap_windows(times, "decomposed")
    for j, (t, w) in enumerate(zip(times, win)):
        if t.op.kind not in COMM_KINDS:
            assert w is None
            continue
        if t.op.kind == "all_reduce":
            producer = max(k for k in range(j) if times[k].op.kind == "gemm" and times[k].op.count == t.op.count)
            assert w == times[producer].time and w > 0
    stream = overlap_windows(times, "stream")
    ar = [j for j, t in enumerate(times) if t.op.kind == "all_reduce"]
    assert all(stream[j] >= win[j] for j in ar)  # the segment before includes the producing GEMM
    assert all(w == 0.0 for w, t in zip(overlap_windows(times, "none"), times) if t.op.kind in COMM_KINDS)


def test_exposed_runs_replace_the_fixed_fraction():
    hw, times = _timed_step()
    comm = [j for j, t in enumerate(times) if t.op.kind in COMM_KINDS]
    assert comm
    none = exposed_runs(times, "none", DEFAULTS)
    half = exposed_runs(times, "fixed", DEFAULTS, fraction=0.5)
    dec = exposed_runs(times, "decomposed", DEFAULTS, hw=hw, world=8)
    fused = exposed_runs(times, "fused", DEFAULTS, hw=hw, world=8)
    for j in comm:
        assert none[j] == times[j].time and half[j] == pytest.approx(0.5 * times[j].time)
        assert 0 < fused[j] <= dec[j] <= times[j].time * (1 + 1e-12)
    assert all(none[j] is None for j in range(len(times)) if j not in comm)
    # overlap cannot hide more than the GEMM it pipelines with lasts; at 4k tokens it hides a good part
    win = overlap_windows(times, "decomposed")
    assert all(dec[j] >= times[j].time - win[j] - 1e-12 for j in comm)
    assert sum(dec[j] for j in comm) < 0.85 * sum(times[j].time for j in comm)


def _stream_row(t, c, s, i, op="all_reduce"):
    ge, ce = corun(t, c, s, i)
    return {"id": f"overlap|stream|{t}|{c}", "kind": "overlap", "error": None, "time_s": max(float(ge), float(ce)),
            "params": {"method": "stream", "op": op, "chunks": 1, "backend": "nccl"},
            "gemm_s": t, "comm_s": c, "gemm_overlapped_s": float(ge), "comm_overlapped_s": float(ce)}


def _decomposed_row(t, c, n, s, i, overhead, latency):
    span, exposed = pipeline(t, c, n, overhead, latency, s, i)
    return {"id": f"overlap|decomposed|{t}|{c}|{n}", "kind": "overlap", "error": None,
            "time_s": float(span) + float(exposed),
            "params": {"method": "decomposed", "op": "all_reduce", "chunks": n, "backend": "nccl"},
            "gemm_s": t, "comm_s": c, "gemm_chunks_s": t + (n - 1) * overhead, "comm_chunks_s": c + (n - 1) * latency}


def test_fit_recovers_sm_share_interference_and_chunk_overhead():
    s, i, o = 0.22, 0.35, 7e-6
    rows = [_stream_row(1.4e-3, c, s, i) for c in (1e-4, 4e-4, 1.2e-3, 3e-3, 6e-3)]
    rows += [_stream_row(2e-4, 1e-3, s, i)]
    rows += [_decomposed_row(t, c, n, s, i, o, 1.5e-5) for t, c in ((6e-4, 3e-4), (1.2e-3, 6e-4), (5e-4, 1.5e-3))
             for n in (1, 2, 4, 8)]
    rows.append({"id": "overlap|failed", "kind": "overlap", "error": "RuntimeError", "time_s": None, "params": {}})
    fitted, report = fit_overlap(rows)
    assert fitted["sm_share"] == pytest.approx(s, rel=1e-3)
    assert fitted["interference"] == pytest.approx(i, rel=1e-3)
    assert fitted["chunk_overhead_s"] == pytest.approx(o, rel=1e-6)
    assert report["stream_rows"] == 6 and report["decomposed_rows"] == 12
    assert report["decomposed_exposed_fraction_abs_error"]["max"] < 1e-6
    assert report["stream_exposed_fraction_abs_error"]["max"] < 1e-3
    assert check_params(fitted) is None
    # the fitted values flow into the model through the profile
    prof = DEFAULTS.with_(overlap=fitted)
    assert overlap_params(prof)["sm_share"] == fitted["sm_share"]
    assert exposed_comm(1e-3, 2e-4, "stream", prof) != exposed_comm(1e-3, 2e-4, "stream", DEFAULTS)


def test_fit_without_rows_changes_nothing():
    assert fit_overlap([])[0] == {}


def test_every_default_is_an_estimate_with_its_reasoning():
    for name, p in PARAMS.items():
        assert p.lo <= p.default <= p.hi, name
        assert p.reason.startswith("estimate:") and len(p.reason) > 40, name
    assert check_params({k: p.default for k, p in PARAMS.items()}) is None
    assert "sm_share" in check_params({"sm_share": float("nan")})
