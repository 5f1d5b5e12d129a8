"""The Hugging Face transformers preset (--engine hf): its eager layer's kernels and caches, and host costs."""
from __future__ import annotations

import pytest

from perfmodel.graph import Step, build_ops
from perfmodel.host_costs import DEFAULT, GENERATE_STEP_KERNELS, measured_host_costs
from perfmodel.paths import repo_root
from perfmodel.resolve import resolve_hardware, resolve_model
from perfmodel.scenario import Scenario

HF_DIR = repo_root() / "calibration" / "h200" / "hf"


def _ops(cache: str, batch=1, ctx=128, isl=128, osl=64, model="llama-3.1-8b"):
    hw = resolve_hardware("h200")
    sc = Scenario(engine="hf", kv_cache=cache, isl=isl, osl=osl).for_hardware(hw)
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
    host = scenario_host_costs(sc, hw)
    kernels = sum(t.op.kernels * t.op.count for t in step.times)
    assert step.time_s == pytest.approx(kernels * host.kernel_s + host.step_s, rel=0.05)
    # a serving engine's step on the same part is device-bound and several times faster
    trt = evaluate_step(m, hw, Scenario(engine="trtllm").for_hardware(hw), resolve_profile(None, hw, "trtllm"),
                        Step("decode", 1, 1, 128))
    assert step.time_s > 3 * trt.time_s
    # and a part with no host measurement of its own takes the lent machine's host (the host is not the GPU)
    assert scenario_host_costs(Scenario(engine="hf").for_hardware(resolve_hardware("b200")),
                               resolve_hardware("b200")) == host


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
