"""Power model: the fitter recovers known parameters from synthetic rows, the carry rules, step and projection
energy, and (when the committed H200 run has power rows) the held-out accuracy on real measurements."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfmodel.measure.shapes import _layer
from perfmodel.energy import carry_power, power_params, projection_energy, step_energy
from perfmodel.energy.carry import node_factor, process_node
from perfmodel.fit.power import _layer_parts, _work, fit_power
from perfmodel.energy.model import default_power, step_energy_parts
from perfmodel.errors import InputError
from perfmodel.profile import DEFAULTS
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile

ROOT = Path(__file__).resolve().parent.parent
TRUE = {"idle_w": 95.0, "static_w": 140.0, "j_per_byte": 9.0e-11, "j_per_flop": {"bf16": 6.5e-13, "fp8": 3.6e-13}}
LIMIT = 700.0


def _energy(t, flops: dict, nbytes, p=TRUE, limit=LIMIT):
    dyn = p["j_per_byte"] * nbytes + sum(p["j_per_flop"][f] * v for f, v in flops.items())
    return p["static_w"] * t + min(dyn, (limit - p["static_w"]) * t)


def _row(rid, params, t, flops_by_fmt, nbytes, held_out=False, iterations=1000, gaps=0.0):
    per_run = _energy(t, flops_by_fmt, nbytes)
    duration = iterations * t
    return {"id": rid, "kind": "power", "params": {**params, "held_out": held_out}, "time_s": t,
            "iterations": iterations, "duration_s": duration, "energy_j": per_run * iterations,
            "avg_power_w": per_run / t, "energy_source": "synthetic (test)", "flops": sum(flops_by_fmt.values()),
            "bytes": nbytes, "sm_clock_mhz": 1980, "power_limit_w": LIMIT, "temperature_c": 50, "error": None}


def synthetic_rows(hw) -> list[dict]:
    """Rows generated from TRUE, shaped as the suite writes them; times from a plain roofline."""
    rows = [{"id": "idle", "kind": "power", "params": {"workload": "idle", "held_out": False}, "time_s": 1.0,
             "iterations": 1, "duration_s": 1.0, "energy_j": TRUE["idle_w"], "avg_power_w": TRUE["idle_w"],
             "error": None, "power_limit_w": LIMIT}]
    # kernels reach different shares of the bandwidth and of the peak (small ones less), which is what
    # tells static power (per second) from energy per byte and per FLOP
    eff = iter([0.9, 0.55, 0.75, 0.4, 0.85, 0.6, 0.8, 0.5, 0.7, 0.45, 0.65, 0.35, 0.9, 0.3, 0.6, 0.8, 0.5])
    bw = hw.hbm_bandwidth
    for fmt in ("bf16", "fp8"):
        size = 1.0 if fmt == "fp8" else 2.0
        for m, n, k in ((16, 28672, 8192), (64, 8192, 8192), (128, 4096, 14336), (256, 8192, 8192),
                        (1024, 8192, 8192), (8192, 8192, 8192)):
            f = 2.0 * m * n * k
            b = (m * k + k * n) * size + m * n * 2
            e = next(eff)
            t = max(f / (hw.tensor_flops[fmt] * e), b / (bw * e)) + 4e-6
            rows.append(_row(f"gemm|{fmt}|{m}", {"workload": "gemm", "m": m, "n": n, "k": k, "dtype": fmt},
                             t, {fmt: f}, b))
    for nbytes in (2**24, 2**28, 2**30):
        rows.append(_row(f"copy|{nbytes}", {"workload": "copy", "bytes": nbytes}, 2 * nbytes / (bw * next(eff)),
                         {}, 2 * nbytes))
    for b, s in ((64, 8192), (8, 32768)):
        nbytes = b * 8 * s * 256 * 2.0
        f = 2.0 * b * 32 * s * 256
        rows.append(_row(f"attn|{b}", {"workload": "attention", "batch": b, "heads_q": 32, "heads_kv": 8, "seq_q": 1,
                                       "seq_kv": s, "head_dim": 128, "causal": False, "dtype": "bf16"},
                         nbytes / (bw * next(eff)) + 8e-6, {"bf16": f}, nbytes))
    prof = resolve_profile(None, hw)
    for params in (_layer("llama-3.1-8b", 1, "prefill", 1, 2048, 0, False),
                   _layer("llama-3.1-8b", 1, "decode", 64, 1, 2048, True),
                   _layer("llama-3.1-70b", 8, "decode", 32, 1, 4096, True)):
        times = _layer_parts(params, hw, prof)
        flops, nbytes = _work(times)
        t = sum(float(x.time) * x.op.count for x in times) * 1.05
        rows.append(_row(f"layer|{params['phase']}|{params['model']}", {"workload": "layer", **params}, t, flops,
                         nbytes, held_out=True))
    return rows


@pytest.fixture(scope="module")
def h200():
    return resolve_hardware("h200")


def test_fit_recovers_known_parameters(h200):
    new, report = fit_power(DEFAULTS, synthetic_rows(h200), h200)
    p = new.power
    assert p["idle_w"] == pytest.approx(TRUE["idle_w"])
    assert p["static_w"] == pytest.approx(TRUE["static_w"], rel=0.03)
    assert p["j_per_byte"] == pytest.approx(TRUE["j_per_byte"], rel=0.03)
    assert p["j_per_flop"]["bf16"] == pytest.approx(TRUE["j_per_flop"]["bf16"], rel=0.05)
    assert p["j_per_flop"]["fp8"] == pytest.approx(TRUE["j_per_flop"]["fp8"], rel=0.05)
    assert report["train"]["median_abs_error"] < 0.01
    assert report["rows"]["at_limit"] >= 1  # the big GEMMs ran at the limit, as on the device
    # held-out whole layers, predicted from the fitted parameters and their ops
    assert report["held_out"]["n"] == 3 and report["held_out"]["median_abs_error"] < 0.02
    assert "power" in new.validation


def test_fit_skips_bad_rows_and_refuses_none(h200):
    rows = synthetic_rows(h200)
    rows.append({"id": "x", "kind": "power", "params": {"workload": "gemm"}, "error": "CUDA OOM"})
    rows.append({"id": "y", "kind": "power", "params": {"workload": "warp"}, "energy_j": 1, "duration_s": 1,
                 "iterations": 1, "error": None})
    rows.append({"id": "z", "kind": "power", "params": {"workload": "copy"}, "energy_j": float("nan"),
                 "duration_s": 1, "iterations": 1, "error": None})
    _, report = fit_power(DEFAULTS, rows, h200)
    assert sum(report["rows"]["skipped"].values()) == 3
    with pytest.raises(InputError):
        fit_power(DEFAULTS, [r for r in rows if r["params"].get("workload") == "idle"], h200)


def test_carry_rules(h200):
    b200 = resolve_hardware("b200")
    a100 = resolve_hardware("a100-sxm-80gb")
    p = {**TRUE, "tdp_w": 700.0, "fitted": 1.0}
    assert carry_power(p, h200, h200) == p
    c = carry_power(p, h200, b200)
    assert c["static_w"] == pytest.approx(TRUE["static_w"] * b200.tdp_w / h200.tdp_w)
    assert c["tdp_w"] == b200.tdp_w and c["carried"] == 1.0
    # energy per FLOP follows (TDP - static) / peak: Blackwell's bf16 FLOP is cheaper than Hopper's
    dyn_s, dyn_t = 700 - TRUE["static_w"], b200.tdp_w - c["static_w"]
    ratio = (dyn_t / b200.tensor_flops["bf16"]) / (dyn_s / h200.tensor_flops["bf16"])
    assert c["j_per_flop"]["bf16"] == pytest.approx(TRUE["j_per_flop"]["bf16"] * ratio)
    assert c["j_per_flop"]["bf16"] < TRUE["j_per_flop"]["bf16"]
    # fp4 was never measured on the H200: it starts from fp8 and takes B200's fp4/fp8 rate ratio
    assert c["j_per_flop"]["fp4"] == pytest.approx(c["j_per_flop"]["fp8"] * b200.tensor_flops["fp8"]
                                                   / b200.tensor_flops["fp4"])
    # HBM energy per byte by the process of the memory path
    assert c["j_per_byte"] == pytest.approx(TRUE["j_per_byte"] * node_factor("4NP") / node_factor("4N"))
    assert carry_power(p, h200, a100)["j_per_flop"]["bf16"] > TRUE["j_per_flop"]["bf16"]
    assert process_node("cdna3") == ("N5", "N6") and process_node("unknown-generation") == process_node("hopper")


def test_power_reaches_another_part_only_through_the_transfer_carry(h200):
    b200 = resolve_hardware("b200")
    prof = DEFAULTS.with_(fitted=True, spec_key="h200-sxm", power={**TRUE, "tdp_w": 700.0, "fitted": 1.0})
    own = power_params(prof, h200)
    assert own["static_w"] == TRUE["static_w"] and own["j_per_flop"]["bf16"] == TRUE["j_per_flop"]["bf16"]
    from perfmodel.energy.model import UncarriedPower
    from perfmodel.transfer import carry

    other = power_params(carry(prof, h200, b200), b200)  # the one path power takes to another part
    assert other["tdp_w"] == b200.tdp_w and other["carried"] == 1.0
    with pytest.raises(UncarriedPower):  # never carried a second time at use
        power_params(prof, b200)
    assert power_params(DEFAULTS, b200) == default_power(b200)


def test_step_energy_lies_between_static_and_the_limit(h200):
    from perfmodel.graph import Step
    from perfmodel.projection import evaluate_step
    from perfmodel.scenario import Scenario

    prof = resolve_profile(None, h200)
    sc = Scenario().for_hardware(h200).validated()
    m = resolve_model("llama8b")
    params = power_params(prof, h200)
    for step in (Step("prefill", 1, 4096, 0), Step("decode", 64, 1, 2048), Step("decode", 1, 1, 128)):
        ph = evaluate_step(m, h200, sc, prof, step)
        e = step_energy(ph, h200, prof)
        s, d = step_energy_parts(ph, h200, prof)
        assert e == pytest.approx(s + d)
        assert params["static_w"] <= e / ph.time_s <= h200.tdp_w + 1e-9
    big = evaluate_step(m, h200, sc, prof, Step("prefill", 8, 4096, 0))
    assert step_energy(big, h200, prof) / big.time_s == pytest.approx(h200.tdp_w)  # a long prefill sits at the limit


def test_projection_energy(h200):
    from perfmodel import project

    p = project(h200, "llama8b", batch="max", isl=1024, osl=256)
    e = projection_energy(p, gpu_hour_usd=2.5)
    j = e["joules_per_token"]
    assert j["prefill"] > 0 and j["decode"] > 0 and j["output"] > j["decode"]
    assert e["tokens_per_joule"] == pytest.approx(1.0 / j["output"])
    assert e["avg_power_w"] == pytest.approx(j["output"] * p.throughput_tok_s / p.scenario.gpus)
    assert 0 < e["avg_power_w"] <= h200.tdp_w * (1 + 1e-9)  # at the power limit, up to rounding
    assert e["usd_per_million_tokens"] == pytest.approx(2.5 / 3600 / p.throughput_tok_s * 1e6)
    assert e["tokens_s_per_mw"] == pytest.approx(p.throughput_tok_s / e["replica_power_w"] * 1e6)
    json.dumps(e, allow_nan=False)
    one = projection_energy(project(h200, "llama8b", batch=1))
    assert one["joules_per_token"]["decode"] > 10 * j["decode"]  # a lone sequence pays the static power alone


def test_real_h200_power_rows_when_present(h200):
    path = ROOT / "calibration" / "h200" / "measurements.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines()] if path.is_file() else []
    rows = [r for r in rows if r.get("kind") == "power"]
    if len(rows) < 6:
        pytest.skip("the committed H200 run has no power rows")
    prof = resolve_profile(None, h200)
    _, report = fit_power(prof, rows, h200)
    assert report["held_out"]["n"] >= 2
    assert report["held_out"]["median_abs_error"] < 0.10  # the goal: energy per step within 10%
    assert np.isfinite(report["held_out_end_to_end"]["median_abs_error"])
