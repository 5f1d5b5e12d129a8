"""The Hugging Face transformers preset (--engine hf): its eager layer's kernels and caches, and host costs."""
from __future__ import annotations

import pytest

from perfmodel.graph import Step, build_ops
from perfmodel.host_costs import DEFAULT, GENERATE_STEP_KERNELS, measured_host_costs
from perfmodel.paths import repo_root
from perfmodel.resolve import resolve_hardware, resolve_model
from perfmodel.scenario import Scenario

HF_DIR = repo_root() / "calibration" / "h200" / "hf"


def _ops(cache: str, batch=1, ctx=128, isl=128, osl=64, model="llama-3.1-8b", launch="eager"):
    hw = resolve_hardware("h200")
    sc = Scenario(engine="hf", kv_cache=cache, isl=isl, osl=osl, launch=launch).for_hardware(hw)
    return build_ops(resolve_model(model), Step("decode", batch, 1, ctx), sc)


def test_a_llama_layer_launches_what_the_profiler_counted():
    # transformers 5.17's LlamaDecoderLayer at batch 1 on the H200: 45 kernels a layer (kernels.csv: 12 for the
    # seven products with cuBLAS's split-K, 16 for two RMSNorms, 10 for rotary, 2 cache cats, SiLU and the
    # product, 2 residual adds, SDPA)
    layer = [o for o in _ops("dynamic") if o.scope == "layer"]
    per_layer = sum(o.kernels * o.count for o in layer) / 32
    assert per_layer == pytest.approx(45.0)
    names = {o.name for o in layer}
    assert {"attn.q", "attn.k", "attn.v", "ffn.gate", "ffn.up", "attn.cache_cat"} <= names
    assert "attn.qkv" not in names and "attn.kv_write" not in names


def test_the_dynamic_cache_moves_the_whole_cache_each_step():
    small, large = ({o.name: o for o in _ops("dynamic", batch=32, ctx=c)} for c in (128, 1024))
    held = 32 * (1024 + 1) * 2 * 8 * 128 * 2  # batch x positions x K and V x 8 KV heads x 128 x bf16
    assert large["attn.cache_cat"].bytes == pytest.approx(2 * held)  # read it and write it
    assert large["attn.cache_cat"].bytes > 7 * small["attn.cache_cat"].bytes


def test_the_static_cache_attends_over_every_slot_with_every_head():
    ops = {o.name: o for o in _ops("static", batch=32, ctx=1024, isl=1024, osl=64)}
    core = ops["attn.core"]
    assert core.params["seq_kv"] == 1024 + 64 and core.params["heads_kv"] == core.params["heads_q"] == 32
    assert "attn.repeat_kv" in ops  # K and V expanded to 32 heads over max_cache_len


@pytest.mark.skipif(not (HF_DIR / "host.csv").is_file(), reason="the H200's HF measurements are not shipped here")
def test_host_costs_are_read_from_the_measurement():
    h = measured_host_costs(HF_DIR)
    assert 5e-6 < h.kernel_s < 60e-6  # 15-25 us a kernel on the lent host
    # generate()'s own kernels a step, and its two synchronisations (about 26 us each measured)
    assert GENERATE_STEP_KERNELS * h.kernel_s + 2 * 5e-6 < h.step_s < GENERATE_STEP_KERNELS * h.kernel_s + 2 * 100e-6
    assert "measured" in h.source and "estimate" in DEFAULT.source


def test_a_host_bound_decode_step_takes_the_host_time():
    # batch 1: every kernel finishes before the host has issued the next, so the step is the host's: its kernels
    # at the measured cost each, plus generate()'s own work a step
    from perfmodel.host_costs import scenario_host_costs
    from perfmodel.projection import evaluate_step
    from perfmodel.resolve import resolve_profile

    hw = resolve_hardware("h200")
    m = resolve_model("llama-3.1-8b")
    sc = Scenario(engine="hf", isl=128, osl=64).for_hardware(hw)
    prof = resolve_profile(None, hw, "hf")
    step = evaluate_step(m, hw, sc, prof, Step("decode", 1, 1, 128))
    host = scenario_host_costs(sc, prof)
    kernels = sum(t.op.kernels * t.op.count for t in step.times)
    assert step.time_s == pytest.approx(kernels * host.kernel_s + host.step_s, rel=0.05)
    # a serving engine's step on the same part is device-bound and several times faster
    trt = evaluate_step(m, hw, Scenario(engine="trtllm").for_hardware(hw), resolve_profile(None, hw, "trtllm"),
                        Step("decode", 1, 1, 128))
    assert step.time_s > 3 * trt.time_s
    # and a part with no host measurement of its own takes the lent machine's host (the host is not the GPU),
    # chosen and carried unchanged with the profile, which says where it came from
    b200 = resolve_hardware("b200")
    b200_prof = resolve_profile(None, b200, "hf")
    assert scenario_host_costs(Scenario(engine="hf").for_hardware(b200), b200_prof) == host
    assert "carried unchanged" in b200_prof.provenance["host"]["source"]


def test_calibrate_only_hf_names_what_it_needs(tmp_path, capsys):
    # the hf family measures transformers' generate(); without transformers it says so in one line
    pytest.importorskip("torch")
    try:
        import transformers  # noqa: F401
        pytest.skip("transformers is installed: the family would run")
    except ImportError:
        pass
    from perfmodel.cli import main

    assert main(["calibrate", "--device", "cpu", "--only", "hf", "--out", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "transformers" in err[0]


def _hf(**kw):
    from perfmodel.resolve import resolve_profile

    hw = resolve_hardware("h200")
    sc = Scenario(engine="hf", isl=128, osl=64, **kw).for_hardware(hw)
    return hw, sc, resolve_profile(None, hw, "hf")


def test_the_compiled_path_fuses_the_elementwise_kernels_and_keeps_generates_host_work():
    # transformers' static cache compiles the decode step (torch.compile, CUDA graphs): Inductor fuses each norm,
    # rotary and activation into one kernel; the products and the static cache's repeat_kv stay
    # (calibration/h200/hf/compile/kernels.csv); generate()'s own launches around the replay still cost the host
    from perfmodel.host_costs import COMPILED_STEP_LAUNCHES, scenario_host_costs
    from perfmodel.projection import evaluate_step

    eager = {o.name: o for o in _ops("static")}
    hw, sc, prof = _hf(kv_cache="static", launch="auto")
    compiled = {o.name: o for o in build_ops(resolve_model("llama-3.1-8b"), Step("decode", 1, 1, 128), sc)}
    assert eager["attn.norm"].kernels == 8 and compiled["attn.norm"].params.get("fused")
    assert compiled["attn.rotary_q"].params.get("fused") and "attn.repeat_kv" in compiled
    assert compiled["attn.q"].kernels == eager["attn.q"].kernels  # cuBLAS's split-K products either way
    host = scenario_host_costs(sc, prof)
    assert host.graph_step_s == pytest.approx(COMPILED_STEP_LAUNCHES * host.kernel_s, rel=0.2)
    dec = evaluate_step(resolve_model("llama-3.1-8b"), hw, sc, prof, Step("decode", 1, 1, 128))
    device = sum(t.time * t.op.count for t in dec.times)
    assert dec.time_s > device + 0.9 * host.graph_step_s  # the replay's ops plus the host's work around it
    eager_step = evaluate_step(resolve_model("llama-3.1-8b"), hw, _hf(kv_cache="static", launch="eager")[1], prof,
                               Step("decode", 1, 1, 128))
    assert dec.time_s < 0.4 * eager_step.time_s  # measured: 7.3 against 43 ms a token at batch 1
    # prefill is eager either way: transformers compiles the decode step only
    pre = [evaluate_step(resolve_model("llama-3.1-8b"), hw, s, prof, Step("prefill", 1, 128, 0)).time_s
           for s in (sc, _hf(kv_cache="static", launch="eager")[1])]
    assert pre[0] == pytest.approx(pre[1])


def test_a_dynamic_cache_cannot_be_replayed_from_cuda_graphs(capsys):
    from perfmodel.cli import main

    rc = main(["project", "--arch", "h200", "--model", "llama-3.1-8b", "--engine", "hf", "--launch", "auto"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--kv-cache static" in err[0]


@pytest.mark.parametrize("cache,launch", [("dynamic", "eager"), ("static", "eager"), ("static", "auto")])
def test_the_serving_surrogate_prices_hf_steps_as_the_projection_does(cache, launch):
    # the step tables run over arrays of token counts: cuBLAS's split-K launches (at 16 tokens or fewer) must
    # follow each row, and generate()'s per-step host work joins every step
    from perfmodel.serve.steptime import StepModel, exact_step

    hw, sc, prof = _hf(kv_cache=cache, launch=launch)
    m = resolve_model("llama-3.1-8b")
    sm = StepModel(m, hw, sc, prof, max_tokens=256, max_seqs=40, max_context=256)
    for n in (1, 8, 32):
        assert sm.step(n, 160, [])[0] == pytest.approx(exact_step(m, hw, sc, prof, n, 160, []), rel=1e-4)


def test_serving_hf_at_a_low_rate_matches_the_projection():
    from perfmodel.projection import project_resolved
    from perfmodel.serve.simulate import simulate
    from perfmodel.serve.workload import parse_dist, synthetic_requests

    hw, sc, prof = _hf()
    m = resolve_model("llama-3.1-8b")
    reqs = synthetic_requests(20, 0.05, parse_dist("128", field="isl"), parse_dist("64", field="osl"), seed=0)
    out = simulate(hw, m, sc.with_(batch="max"), prof, reqs)
    proj = project_resolved(hw, m, sc.with_(batch=1), prof)
    # TTFT holds generate()'s request setup, TPOT its per-step host work
    assert out["ttft_ms"]["p50"] == pytest.approx(proj.ttft_s * 1e3, rel=1e-3)
    assert out["tpot_ms"]["p50"] == pytest.approx(proj.tpot_s * 1e3, rel=0.02)


def test_validate_reads_a_compiled_row_as_a_graph_replayed_decode(tmp_path):
    # the table's notes say how generate() ran: "cache_implementation=static" with "torch.compile" is the
    # compiled path (decode from CUDA graphs), without it the eager static cache
    import csv

    from perfmodel.validate import run_validation

    src = repo_root() / "workloads" / "validation" / "hf_generate_h200.csv"
    with open(src, encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["id"].startswith("hf-h200-llama-3.1-8b-static")
                and r["id"].endswith("-b1-i128-tpot")]
    assert {("compile" in r["id"]) for r in rows} == {True, False}
    path = tmp_path / "two.csv"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    got = {r["id"]: r["predicted"] for r in run_validation(path)}
    compiled = next(v for k, v in got.items() if "compile" in k)
    eager = next(v for k, v in got.items() if "compile" not in k)
    assert compiled < 0.4 * eager


def test_a_requests_first_token_costs_its_return_to_the_host():
    # a serving engine's TTFT ends when the token is on the host: the sampler, the copy and the wait (the launch
    # family's round_trip rows, fitted into the profile per vocabulary); transformers' generate() pays its own
    # setup instead
    from perfmodel.host_costs import TOKEN_RETURN_S, request_overhead_s, scenario_host_costs, token_return_s
    from perfmodel.profile import DEFAULTS
    from perfmodel.resolve import resolve_profile

    hw = resolve_hardware("h200")
    prof = resolve_profile(None, hw, "trtllm")
    pts = {int(v): t for v, t in prof.token_return_s.items()}
    assert sorted(pts) == [32000, 128256, 151936] and all(5e-6 < t < 200e-6 for t in pts.values())
    assert token_return_s(32000, prof) == pts[32000] and token_return_s(10, prof) == pts[32000]
    assert token_return_s(80128, prof) == pytest.approx((pts[32000] + pts[128256]) / 2)
    assert token_return_s(32000, DEFAULTS) == TOKEN_RETURN_S  # nothing measured: the estimate
    m = resolve_model("llama-3.1-8b")
    trt = Scenario(engine="trtllm").for_hardware(hw)
    assert request_overhead_s(trt, hw, m, prof) == token_return_s(m.vocab, prof)
    assert request_overhead_s(trt.with_(mode="sol"), hw, m, prof) == 0.0
    hf = Scenario(engine="hf").for_hardware(hw)
    assert request_overhead_s(hf, hw, m, prof) == scenario_host_costs(hf, prof).request_s > 1e-3


@pytest.mark.skipif(not (HF_DIR / "request" / "host.csv").is_file(), reason="the H200's request rows are not shipped here")
def test_the_request_setup_constant_is_the_measured_median():
    # REQUEST_SETUP_LAUNCHES: generate()'s own work per call over the bare launch measured beside it, the median
    # of the 31-round calls (calibration/h200/hf/request/host.csv); a host with only its launches carries it
    import csv
    import statistics

    from perfmodel.host_costs import REQUEST_SETUP_LAUNCHES

    with open(HF_DIR / "request" / "host.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    ratios = []
    for setup in (r for r in rows if r["family"] == "request" and "31 rounds" in r["notes"]):
        call = setup["notes"].split(" (")[0]
        bare = next(r for r in rows if r["family"] == "launch" and r["model"] == setup["model"]
                    and r["notes"].startswith(call))
        ratios.append(float(setup["wall_us"]) / float(bare["wall_us"]))
    assert len(ratios) == 6
    assert REQUEST_SETUP_LAUNCHES == pytest.approx(statistics.median(ratios), rel=0.01)
    h = measured_host_costs(HF_DIR)
    assert 1e-3 < h.request_s < 6e-3 and "bare launches" in h.source


def test_a_static_cache_is_the_compiled_decode_generate_runs_by_default():
    """transformers' generate() compiles the decode step of a static cache unless disable_compile=True (issue 26):
    --engine hf --kv-cache static is that path; --launch eager the eager one. --engine hf batches statically."""
    hw = resolve_hardware("h200")
    default = Scenario(engine="hf", kv_cache="static").for_hardware(hw)
    assert default.launch == "auto" and default.launch_for("decode") == "graph" and default.batching == "static"
    assert Scenario(engine="hf", kv_cache="static", launch="eager").for_hardware(hw).launch == "eager"
    assert Scenario(engine="hf").for_hardware(hw).launch == "eager"  # the dynamic cache: no compile
    assert Scenario(engine="hf", batching="continuous").for_hardware(hw).batching == "continuous"  # asked for
    assert Scenario(engine="trtllm").for_hardware(hw).batching == "continuous"


def test_docs_engines_compiled_and_eager_figures_are_the_projection_and_the_table():
    import csv
    import re

    from perfmodel import project

    doc = " ".join((repo_root() / "docs" / "engines.md").read_text().split())
    kw = dict(engine="hf", kv_cache="static", isl=128, osl=64)
    eager = project("h200-sxm", "llama8b", launch="eager", **kw).tpot_s * 1e3
    compiled = project("h200-sxm", "llama8b", **kw).tpot_s * 1e3
    with open(repo_root() / "workloads" / "validation" / "hf_generate_h200.csv", encoding="utf-8") as fh:
        measured = {r["id"]: float(r["value"]) for r in csv.DictReader(fh)}
    m_eager = measured["hf-h200-llama-3.1-8b-static-b1-i128-tpot"]
    m_compiled = measured["hf-h200-llama-3.1-8b-static-compile-b1-i128-tpot"]
    want = (f"eager static cache {eager:.1f} ms a token projected against {m_eager:.1f} ms measured, compiled "
            f"{compiled:.1f} ms against {m_compiled:.1f} ms")
    assert want in doc, re.sub(r"\s+", " ", want)


def test_host_costs_are_a_calibration_family():
    """Host costs come with the profile (fitted from calibration/h200/hf by `perfmodel fit`): --calibration none
    means the documented defaults and says so; $PERFMODEL_HOST_COSTS still names a measurement folder."""
    import os
    import subprocess
    import sys

    from perfmodel.projection import project
    from perfmodel.resolve import resolve_profile

    hw = resolve_hardware("h200")
    fitted = resolve_profile(None, hw, "hf")
    assert fitted.host["kernel_s"] == pytest.approx(measured_host_costs(HF_DIR).kernel_s)
    none = project("h200", "llama-3.1-8b", engine="hf", profile=resolve_profile("none", hw, "hf"))
    line = next(a for a in none.assumptions if a.startswith("host costs"))
    assert "documented defaults" in line and f"{DEFAULT.kernel_s * 1e6:.1f} us a kernel" in line
    measured = project("h200", "llama-3.1-8b", engine="hf")
    assert "measured on the host" in next(a for a in measured.assumptions if a.startswith("host costs"))
    assert not any(a.startswith("host costs") for a in project("h200", "llama-3.1-8b").assumptions)
    if (HF_DIR / "host.csv").is_file():
        env = {**os.environ, "PERFMODEL_HOST_COSTS": str(HF_DIR)}
        done = subprocess.run([sys.executable, "-m", "perfmodel", "project", "--arch", "h200", "--model", "llama8b",
                               "--engine", "hf", "--calibration", "none"], capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0 and "$PERFMODEL_HOST_COSTS: measured" in done.stdout
