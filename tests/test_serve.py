"""Serving simulation: the issue's invariants (unloaded TTFT, unbounded queueing past saturation, Little's
law, saturation throughput against `project --batch max`) and the mechanisms behind them."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel.graph import Step
from perfmodel.projection import evaluate_step, project_resolved
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile
from perfmodel.scenario import Scenario
from perfmodel.cost.tables import without_tables
from perfmodel.serve.engine import EngineConfig, simulate_instance
from perfmodel.serve.metrics import itl_summary_ms, weighted_percentiles
from perfmodel.resolve import resolve_scenario as for_hardware
from perfmodel.serve.simulate import ServeOptions, simulate
from perfmodel.serve.steptime import StepModel, exact_step
from perfmodel.serve.workload import parse_dist, synthetic_requests


@pytest.fixture(scope="module")
def h200():
    hw = resolve_hardware("h200")
    return hw, resolve_profile(None, hw)


def _reqs(n, rate, isl="1024", osl="128", seed=0, **kw):
    return synthetic_requests(n, rate, parse_dist(isl, field="isl"), parse_dist(osl, field="osl"), seed=seed, **kw)


def _sc(hw, **kw):
    return for_hardware(Scenario(**{"batch": "max", **kw}), hw, None).validated()


# --- invariants --------------------------------------------------------------------------------------

def test_low_rate_p50_ttft_is_the_unloaded_prefill(h200):
    hw, prof = h200
    model = resolve_model("llama8b")
    sc = _sc(hw)
    out = simulate(hw, model, sc, prof, _reqs(300, 0.02, osl="64"))
    unloaded = evaluate_step(model, hw, sc, prof, Step("prefill", 1, 1024, 0)).time_s
    assert out["ttft_ms"]["p50"] == pytest.approx(unloaded * 1e3, rel=2e-3)


def test_past_saturation_queueing_grows_without_bound(h200):
    hw, prof = h200
    model = resolve_model("llama8b")
    sc = _sc(hw)
    sat = project_resolved(hw, model, sc.with_(isl=1024, osl=128), prof).throughput_tok_s / 128  # requests/s
    over = [simulate(hw, model, sc, prof, _reqs(n, 2.0 * sat))["ttft_ms"]["mean"] for n in (500, 1000, 2000)]
    under = [simulate(hw, model, sc, prof, _reqs(n, 0.5 * sat))["ttft_ms"]["mean"] for n in (500, 1000, 2000)]
    # past saturation the wait grows with every request admitted: about linearly in the run's length
    assert over[1] > 1.7 * over[0] and over[2] > 1.7 * over[1]
    # below it, it settles
    assert under[2] < 1.5 * under[0]


@pytest.mark.parametrize("rate", [2.0, 20.0, 60.0])
def test_littles_law(h200, rate):
    hw, prof = h200
    out = simulate(hw, resolve_model("llama8b"), _sc(hw), prof,
                   _reqs(1500, rate, isl="uniform:100:3000", osl="lognormal:150:0.7", seed=3))
    law = out["littles_law"]
    # the time-average number in the system (integrated from the engine's state) = arrival rate x mean E2E
    assert law["mean_in_system"] == pytest.approx(law["arrival_rate_x_mean_e2e"], rel=1e-6)
    assert law["mean_in_system"] > 0


@pytest.mark.parametrize("model,tp,isl,osl", [("llama8b", 1, 1024, 128), ("llama8b", 1, 128, 1024),
                                              ("llama70b", 4, 2048, 256), ("mixtral-8x7b", 2, 1024, 1024)])
def test_saturation_throughput_matches_project_batch_max(h200, model, tp, isl, osl):
    hw, prof = h200
    m = resolve_model(model)
    sc = _sc(hw, tp=tp, isl=isl, osl=osl)
    # within 5% on the smooth fitted model; with the part's measured tables, whose kernel switches the step
    # tables interpolate across (test_surrogate_follows_measured_tables), within 8%
    for p, tol in ((without_tables(prof), 0.05), (prof, 0.08)):
        proj = project_resolved(hw, m, sc, p)
        out = simulate(hw, m, sc, p, _reqs(4000, 1e5, isl=str(isl), osl=str(osl)))
        assert out["layout"]["instance"]["max_seqs"] == proj.batch
        assert out["throughput_tok_s"] == pytest.approx(proj.throughput_tok_s, rel=tol)


# --- the step-time surrogate --------------------------------------------------------------------------

@pytest.mark.parametrize("model,kw", [("llama8b", {}), ("llama70b", {"tp": 4}), ("deepseek-v3", {"tp": 8, "dtype": "fp8"}),
                                      ("mixtral-8x7b", {"tp": 2, "ep": 2}),
                                      # attention data parallelism: the busiest rank's part and the group's experts
                                      ("deepseek-v3", {"tp": 1, "attention_dp": 8, "ep": 8, "dtype": "fp8"}),
                                      ("mixtral-8x7b", {"tp": 1, "attention_dp": 2, "ep": 2}),
                                      # vLLM pads the ranks to the busiest's tokens in CUDA-graph (decode) steps
                                      ("mixtral-8x7b", {"tp": 1, "attention_dp": 4, "ep": 4, "engine": "vllm"})])
def test_surrogate_matches_the_direct_step(h200, model, kw):
    # the surrogate's structure (op classes, the power clock between two tabulated clocks) on the smooth fitted
    # model; a measured table's kernel switches are checked below (test_surrogate_follows_measured_tables)
    hw, prof = h200
    prof = without_tables(prof)
    m = resolve_model(model)
    sc = _sc(hw, **kw)
    sm = StepModel(m, hw, sc, prof, max_tokens=8192, max_seqs=512, max_context=8192, piece_hint=(1000,))
    for isl in (1000, 1777, 5000):
        ref = evaluate_step(m, hw, sc, prof, Step("prefill", 1, isl, 0)).time_s
        assert sm.step(0, 0.0, [(isl, 0)])[0] == pytest.approx(ref, rel=0.01)
    for n, c in ((1, 1000), (37, 1500), (512, 6000)):
        ref = evaluate_step(m, hw, sc, prof, Step("decode", n, 1, c)).time_s
        assert sm.step(n, c, ())[0] == pytest.approx(ref, rel=0.01)
    rng = np.random.default_rng(0)
    for _ in range(5):
        n = int(rng.integers(1, 400))
        pieces = [(int(rng.integers(1, 3000)), int(rng.integers(0, 3000))) for _ in range(int(rng.integers(1, 4)))]
        c = float(rng.uniform(10, 6000))
        assert sm.step(n, c, pieces)[0] == pytest.approx(exact_step(m, hw, sc, prof, n, c, pieces), rel=0.01)


def test_surrogate_follows_measured_tables(h200):
    """With the part's measured tables (perfmodel.cost.tables), whose kernel switches make decode attention fall
    11% where the context grows 5% (Llama-70B at TP 4, 5,500 -> 5,800 keys), the bilinear step tables stay within
    5% of the direct step."""
    hw, prof = h200
    m = resolve_model("llama70b")
    sc = _sc(hw, tp=4)
    sm = StepModel(m, hw, sc, prof, max_tokens=8192, max_seqs=512, max_context=8192, piece_hint=(1000,))
    for n, c in ((1, 1000), (37, 1500), (512, 6000)):
        ref = evaluate_step(m, hw, sc, prof, Step("decode", n, 1, c)).time_s
        assert sm.step(n, c, ())[0] == pytest.approx(ref, rel=0.05)


def test_mixed_step_reads_the_weights_once(h200):
    """A decode token riding along a prefill chunk costs less than a decode step of its own."""
    hw, prof = h200
    m = resolve_model("llama70b")
    sc = _sc(hw, tp=4)
    sm = StepModel(m, hw, sc, prof, max_tokens=8192, max_seqs=64, max_context=4096)
    # 2016 prefill + 32 decode tokens fill the same GEMM tiles as 2048: only the weight reads differ (a chunk that
    # spills into another tile row pays wave quantization, which is not what this checks)
    mixed = sm.step(32, 2000, [(2016, 0)])[0]
    apart = sm.step(32, 2000, ())[0] + sm.step(0, 0, [(2016, 0)])[0]
    assert mixed < apart


def test_a_shorter_table_is_a_longer_ones_head_bit_for_bit(h200, monkeypatch):
    """The step tables of a layout built for a short budget and few sequences after ones for more (another client
    count, other request lengths) are the longer tables' heads, equal to what a fresh build gives."""
    from perfmodel.serve import steptime

    hw, prof = h200
    m = resolve_model("llama8b")
    steptime._TABLES.clear()
    StepModel(m, hw, _sc(hw, isl=2048, osl=256, prefill_chunk=4096), prof, max_tokens=4096, max_seqs=96,
              max_context=2304)
    sc = _sc(hw, isl=1000, osl=100, prefill_chunk=1500)
    built = []
    build = StepModel._build_1d
    monkeypatch.setattr(StepModel, "_build_1d", lambda self, *a: built.append(a) or build(self, *a))
    reused = StepModel(m, hw, sc, prof, max_tokens=1500, max_seqs=40, max_context=1100)
    assert built == []  # every 1-D table was a head
    steptime._TABLES.clear()
    fresh = StepModel(m, hw, sc, prof, max_tokens=1500, max_seqs=40, max_context=1100)
    for launch in fresh.token:
        assert reused.token[launch] == fresh.token[launch] and reused.seq[launch] == fresh.seq[launch]
        assert len(fresh.seq[launch]["counts"]) == 41
    assert len(fresh.token[fresh.mixed_launch]["counts"]) == 1501


# --- the engine ----------------------------------------------------------------------------------------

def test_preemption_recomputes_and_every_request_finishes(h200):
    hw, prof = h200
    model = resolve_model("llama8b")
    sc = _sc(hw, batch=512)
    reqs = _reqs(600, 1e4, isl="2000", osl="uniform:200:3000", seed=4)
    sm = StepModel(model, hw, sc, prof, max_tokens=8192, max_seqs=512, max_context=5001)
    cfg = EngineConfig(max_seqs=512, token_budget=8192, kv_blocks=2000)  # 32k tokens: far less than 512 sequences
    r = simulate_instance(sm, cfg, reqs)
    assert r.preemptions.sum() > 0
    assert np.all(r.finish > 0) and np.all(r.first_token > 0)
    assert np.all(r.finish >= r.first_token) and np.all(r.first_token >= reqs.arrival)
    assert len(r.itl_extra) >= 1  # a preempted request's stall shows as one long inter-token gap


def test_prefill_first_runs_prompts_alone_while_decoding_waits(h200):
    """SGLang's schedule: a prompt that arrives while others decode runs in steps of its own with the whole budget
    (its first token sooner than riding in decode steps), the decoding sequences wait through them (their TPOT and
    the longest inter-token gap grow by the prompt steps), and every request still finishes."""
    from perfmodel.serve.workload import Requests

    hw, prof = h200
    model = resolve_model("llama8b")
    sm = StepModel(model, hw, _sc(hw, batch=64), prof, max_tokens=4096, max_seqs=64, max_context=20000)
    # 32 sequences decoding from time 0; at 0.5 s four 12,000-token prompts arrive (three 4,096-token steps each)
    n = 36
    arrival = np.r_[np.zeros(32), np.full(4, 0.5)]
    reqs = Requests(arrival, np.r_[np.full(32, 200), np.full(4, 12000)], np.full(n, 400), np.full(n, -1),
                    np.zeros(n, dtype=int))
    runs = {}
    for prefill_first in (False, True):
        cfg = EngineConfig(max_seqs=64, token_budget=4096, kv_blocks=100000, prefill_first=prefill_first)
        runs[prefill_first] = simulate_instance(sm, cfg, reqs)
    mixed, first = runs[False], runs[True]
    for r in (mixed, first):
        assert np.all(r.finish > r.first_token) and np.all(r.first_token >= reqs.arrival)
    late = slice(32, None)
    assert np.all(first.first_token[late] < mixed.first_token[late])  # prompts alone: the whole budget, sooner
    early = slice(0, 32)
    tpot = lambda r: (r.finish[early] - r.first_token[early]) / 399  # noqa: E731
    assert np.all(tpot(first) > tpot(mixed))  # the decoding sequences waited through the prompt steps
    longest = lambda r: max(t for t, _, _, _ in r.itl_spans)  # noqa: E731
    assert longest(first) > 3 * sm.step(0, 0, [(4096, 0)])[0] > longest(mixed)  # three prompt steps in one gap


def test_a_request_larger_than_the_cache_is_refused():
    from perfmodel.errors import InputError
    from perfmodel.serve.engine import check_fits

    with pytest.raises(InputError, match="KV blocks"):
        check_fits(_reqs(3, 1.0, isl="1000", osl="100"), EngineConfig(max_seqs=4, token_budget=8192, kv_blocks=10))


def test_prefix_caching_skips_cached_prompt_tokens(h200):
    hw, prof = h200
    model = resolve_model("llama8b")
    sc = _sc(hw)
    reqs = _reqs(800, 10, isl="3000", osl="64", prefix_len=2500, prefix_groups=3, seed=5)
    off = simulate(hw, model, sc, prof, reqs)
    on = simulate(hw, model, sc, prof, reqs, ServeOptions(prefix_caching=True))
    assert off["prefix_cache_hit_tokens"] == 0
    assert on["prefix_cache_hit_tokens"] > 0.7 * 800 * 2496  # nearly every request hits its group's prefix
    assert on["ttft_ms"]["p50"] < 0.5 * off["ttft_ms"]["p50"]


def test_disaggregated_layout_moves_the_kv_cache(h200):
    hw, prof = h200
    model = resolve_model("llama70b")
    sc = Scenario(batch="max", tp=4)
    reqs = _reqs(400, 3, isl="2048", osl="256")
    up = simulate(hw, model, sc, prof, reqs, ServeOptions(disagg=(1, 1)))
    out = simulate(hw, model, sc, prof, reqs, ServeOptions(disagg=(1, 1), kv_link="scaleout"))
    assert up["layout"]["kv_transfer"]["link"] == "scaleup" and up["layout"]["gpus"] == 8
    assert out["layout"]["kv_transfer"]["mean_ms"] > 4 * up["layout"]["kv_transfer"]["mean_ms"]
    assert out["tpot_ms"]["mean"] > up["tpot_ms"]["mean"]
    assert up["ttft_ms"]["p50"] == out["ttft_ms"]["p50"]  # the first token comes from the prefill instance


def test_run_is_deterministic_and_finite(h200):
    import json

    hw, prof = h200
    model = resolve_model("llama8b")
    a = simulate(hw, model, _sc(hw), prof, _reqs(300, 15, isl="normal:800:300", osl="exponential:100", seed=9),
                 ServeOptions(slo_ttft_s=0.2, slo_tpot_s=0.02, gpu_hour_usd=2.0))
    b = simulate(hw, model, _sc(hw), prof, _reqs(300, 15, isl="normal:800:300", osl="exponential:100", seed=9),
                 ServeOptions(slo_ttft_s=0.2, slo_tpot_s=0.02, gpu_hour_usd=2.0))
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "throughput_tok_s", "goodput_req_s", "slo_attainment"):
        assert a[key] == b[key]
    json.dumps({k: v for k, v in a.items() if k != "simulation"}, allow_nan=False)
    e = a["energy"]
    assert 0 < e["avg_power_w"] <= hw.tdp_w
    assert e["usd_per_million_tokens"] > 0 and 0 <= a["slo_attainment"] <= 1


def test_energy_between_idle_and_the_limit(h200):
    from perfmodel.energy import power_params

    hw, prof = h200
    p = power_params(prof, hw)
    model = resolve_model("llama8b")
    low = simulate(hw, model, _sc(hw), prof, _reqs(200, 0.05))["energy"]
    high = simulate(hw, model, _sc(hw), prof, _reqs(2000, 1e4))["energy"]
    assert p["idle_w"] <= low["avg_power_w"] < high["avg_power_w"] <= hw.tdp_w + 1e-6
    assert high["joules_per_token"]["output"] < low["joules_per_token"]["output"]


# --- metrics -------------------------------------------------------------------------------------------

def test_weighted_percentiles_equal_the_repeated_array():
    rng = np.random.default_rng(2)
    v, w = rng.random(40), rng.integers(1, 6, 40)
    assert weighted_percentiles(v, w) == pytest.approx(list(np.percentile(np.repeat(v, w), [50, 90, 99])))


def test_itl_of_a_linear_run_expands_every_step():
    s = itl_summary_ms([(0.010, 0.020, 11, 3)], [0.5])
    steps = np.repeat(np.linspace(0.010, 0.020, 11), 3)
    allv = np.concatenate([steps, [0.5]])
    assert s["p50"] == pytest.approx(np.percentile(allv, 50) * 1e3)
    assert s["p99"] == pytest.approx(np.percentile(allv, 99) * 1e3)
    assert s["mean"] == pytest.approx(allv.mean() * 1e3)


def test_length_distributions():
    rng = np.random.default_rng(0)
    assert set(parse_dist("77", field="x").sample(rng, 10)) == {77}
    u = parse_dist("uniform:10:20", field="x").sample(rng, 5000)
    assert u.min() == 10 and u.max() == 20
    ln = parse_dist("lognormal:300:0.5", field="x").sample(rng, 20000)
    assert np.median(ln) == pytest.approx(300, rel=0.05)
    assert parse_dist("normal:5:100", field="x").sample(rng, 1000).min() >= 1
    assert parse_dist("exponential:50", field="x").sample(rng, 20000).mean() == pytest.approx(50, rel=0.05)


def test_a_requests_setup_delays_it_and_counts_in_its_latency(h200):
    # EngineConfig.request_s: the scheduler sees each request that much after its arrival; at a low rate every
    # first token comes exactly that much later, latencies count from the arrival and Little's law still holds
    hw, prof = h200
    model = resolve_model("llama8b")
    steps = StepModel(model, hw, _sc(hw), prof, max_tokens=8192, max_seqs=64, max_context=2048)
    reqs = _reqs(40, 0.05, osl="16")
    runs = [simulate_instance(steps, EngineConfig(max_seqs=64, token_budget=8192, kv_blocks=100000, request_s=s),
                              reqs) for s in (0.0, 0.01)]
    assert np.allclose(runs[1].first_token - runs[0].first_token, 0.01)
    assert np.allclose(runs[1].arrival, runs[0].arrival)
    assert runs[1].in_system_s == pytest.approx(runs[0].in_system_s + 40 * 0.01, rel=1e-9)


def test_every_attention_group_brings_its_own_kv_pool():
    # attention data parallelism: each group of --tp GPUs keeps its own sequences' cache in its own memory, so
    # the instance's pool is the groups' together (before: one GPU's, and wide-EP decode workers preempted
    # thousands of times)
    from perfmodel.serve.steptime import kv_pool_blocks

    hw = resolve_hardware("b200")
    m = resolve_model("llama8b")
    four = Scenario(tp=1, attention_dp=4, engine="sglang").validated().for_hardware(hw)
    per_group = kv_pool_blocks(m, hw, four.with_(attention_dp=1), 64, 16)
    assert per_group > 0
    assert kv_pool_blocks(m, hw, four, 4 * 64, 16) == pytest.approx(4 * per_group, rel=1e-3)
