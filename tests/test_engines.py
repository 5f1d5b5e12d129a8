"""Kernel stacks: attention backends, engine presets, device-visible memory."""
from __future__ import annotations
from perfmodel.resolve import resolve_scenario

import pytest

from perfmodel.profile import load_profile

from perfmodel.attention_kernels import KERNELS, resolve
from perfmodel.capacity import max_batch, memory
from perfmodel.cost import attention_kernel, time_op
from perfmodel.engines import ENGINES, engine_for
from perfmodel.errors import InputError
from perfmodel.graph import Step, build_ops
from perfmodel.models import load_model
from perfmodel.ops import attention
from perfmodel.profile import DEFAULTS
from perfmodel.projection import project
from perfmodel.scenario import Scenario
from perfmodel.spec import load_spec, spec_with

MiB = 2**20


def _cudnn_default_profile():
    """A profile whose measured plain dispatch is cuDNN, with cuDNN twice as fast as flash."""
    return DEFAULTS.with_(attn_default={"prefill": "cudnn", "decode": "cudnn"},
                          attn_eta={**DEFAULTS.attn_eta, "cudnn": 0.8, "flash": 0.4})


def test_kernels_torch_uses_the_backend_plain_pytorch_dispatches_to():
    hw, model = load_spec("h200"), load_model("llama70b")
    prof = _cudnn_default_profile()
    sc = Scenario(engine="torch", kernels="torch").for_hardware(hw)
    core = next(op for op in build_ops(model, Step("prefill", 1, 8192, 0), resolve_scenario(sc, None, None)) if op.kind == "attention")
    assert attention_kernel(core, hw, prof).backend == "cudnn"
    t_default = time_op(core, hw, prof).time
    # the same op timed with flash's parameters (what the suite used to force) is slower
    flash = core.with_params(kernel="flash") if hasattr(core, "with_params") else None
    if flash is None:
        from perfmodel.ops import Op

        flash = Op(core.name, core.kind, core.phase, core.flops, core.bytes, {**core.params, "kernel": "flash"})
    assert time_op(flash, hw, prof).time > 1.5 * t_default
    # and the other way round: a profile that saw flash dispatched times plain PyTorch with flash
    prof_flash = prof.with_(attn_default={"prefill": "flash", "decode": "flash"})
    assert time_op(core, hw, prof_flash).time == pytest.approx(time_op(flash, hw, prof).time)


def test_carried_kernels_name_their_source_and_fall_back_off_their_generation():
    r = resolve("fa3", "prefill", "hopper", {})
    assert r.carried and r.backend == "cudnn" and "FlashAttention-3" in r.kernel.source
    off = resolve("fa3", "prefill", "ampere", {})
    assert off.kernel.key == "cudnn" and "does not run on ampere" in off.note
    assert resolve("auto", "decode", "hopper", {"decode": "cudnn"}).kernel.key == "cudnn"
    assert resolve("auto", "decode", "hopper", {}).kernel.key == "flash"  # nothing measured: FA2
    with pytest.raises(InputError):
        resolve("fa9", "prefill", "hopper", {})
    assert all(k.measured_as in ("flash", "cudnn", "efficient") for k in KERNELS.values())


def test_h100_and_h200_visible_memory_is_what_nvidia_smi_shows():
    h100, h200 = load_spec("h100-sxm"), load_spec("h200")
    assert h100.hbm_visible_bytes == 81559 * MiB
    assert h200.hbm_visible_bytes == 143771 * MiB
    assert h100.figures["memory.visible"].source == "measured"
    # a part without a reading derives it from the nominal figure, and says so
    b200 = load_spec("b200")
    assert b200.figures["memory.visible"].source == "estimate"
    assert 180e9 < b200.hbm_visible_bytes < 180 * 2**30
    # a what-if capacity carries the visible share along
    more = spec_with(h200, hbm_bytes=282e9)
    assert more.hbm_visible_bytes == pytest.approx(2 * h200.hbm_visible_bytes, rel=1e-9)


def test_what_if_spec_that_changes_capacity_rederives_visible_memory(tmp_path):
    p = tmp_path / "big.yaml"
    p.write_text(f"extends: {load_spec('h200').files[0]}\nname: H200 with 200 GB\n"
                 "memory:\n  capacity: {value: 200 GB, source: estimate}\n")
    s = load_spec(p)
    assert s.hbm_visible_bytes > 143771 * MiB
    assert s.figures["memory.visible"].source == "estimate"


def test_llama70b_fp8_tp1_5000_500_fits_an_h100_under_tensorrt_llm():
    hw, model = load_spec("h100-sxm"), load_model("llama-3.1-70b")
    sc = Scenario(isl=5000, osl=500, dtype="fp8", batch="max", engine="trtllm")
    assert max_batch(model, resolve_scenario(sc, hw, None), hw) >= 4
    p = project(hw, model, sc)
    assert p.batch >= 4 and p.memory.fits
    assert p.scenario.kv == "fp8"


def test_memory_policies_free_and_total():
    hw, model = load_spec("h200"), load_model("llama-3.1-8b")
    free = Scenario(engine="trtllm").for_hardware(hw)
    total = Scenario(engine="vllm").for_hardware(hw)
    mf, mt = memory(model, free, 1, hw), memory(model, total, 1, hw)
    fixed = mf.weights + mf.activations + mf.workspace
    assert mf.kv_budget == pytest.approx(0.9 * (hw.hbm_visible_bytes - fixed))
    assert mt.kv_budget == pytest.approx(0.9 * hw.hbm_visible_bytes - (mt.weights + mt.activations + mt.workspace))
    for sc, m in ((free, mf), (total, mt)):
        b = max_batch(model, resolve_scenario(sc, hw, None), hw)
        assert memory(model, sc, b, hw).fits and not memory(model, sc, b + 1, hw).fits


def test_sglang_memory_settings_follow_its_server_args():
    """SGLang's defaults by the GPU's memory (nvidia-smi MiB), worked by hand from server_args.py: reserved MiB =
    512 + 1.5 x chunk + 2 x cuda_graph_max_bs + TP x PP / 8 x 1024, at least 10 GiB above 60 GiB."""
    from perfmodel.engines import sglang_memory

    mib = 2**20
    # H200 (143,771 MiB) TP 8: chunk 8192, graphs 512: 512 + 12,288 + 1,024 + 1,024 = 14,848
    assert sglang_memory(143771 * mib, 8) == (8192, round((143771 - 14848) / 143771, 3))
    # B200 (183,527 MiB) TP 8: chunk 16384: 512 + 24,576 + 1,024 + 1,024 = 27,136
    assert sglang_memory(183527 * mib, 8) == (16384, round((183527 - 27136) / 183527, 3))
    # H100 (81,559 MiB) TP 1: graphs 256: 512 + 12,288 + 512 + 128 = 13,440
    assert sglang_memory(81559 * mib, 1) == (8192, round((81559 - 13440) / 81559, 3))
    # a small card: the 10 GiB floor does not apply below 60 GiB (L40S-class 46,068 MiB, TP 4: chunk 4096, graphs 160)
    assert sglang_memory(46068 * mib, 4) == (4096, round((46068 - (512 + 6144 + 320 + 512)) / 46068, 3))
    # an H100 TP 1 would reserve 13,440; the floor lifts a tiny reserve to 10 GiB (chunk 2048 by hand)
    assert sglang_memory(81559 * mib, 1, chunk=2048)[1] == round((81559 - 10240) / 81559, 3)
    # DP attention pads the graphs: 512 x DP x 3, and x 1.5 more above 300
    chunk, f = sglang_memory(183527 * mib, 1, attention_dp=8)
    assert f == round((183527 - (512 + 24576 + 1024 + 128 + 512 * 8 * 4.5)) / 183527, 3)
    # a multimodal model: x 0.95 x the ViT factor (Qwen3.5's tower is larger than a ViT-L/14: less than 0.95)
    vl = load_model("Qwen/Qwen3.5-397B-A17B")
    assert vl.vision is not None
    assert sglang_memory(183527 * mib, 8, model=vl)[1] < 0.95 * sglang_memory(183527 * mib, 8)[1]


def test_sglang_static_policy_keeps_activations_outside_its_share():
    """SGLang's mem_fraction_static holds the weights and the KV pool (model_runner: free after the weights less
    (1 - fraction) of the memory): the activations of a larger chunk take nothing from the KV cache's budget."""
    hw, model = load_spec("b200"), load_model("llama-3.1-8b")
    sc = Scenario(engine="sglang", batch="max").for_hardware(hw)
    m = memory(model, sc, 64, hw)  # 64 prompts of 1,024 tokens: a full chunk of activations
    assert m.kv_budget == pytest.approx(sc.mem_fraction * hw.hbm_visible_bytes - m.weights - m.workspace)
    bigger = memory(model, sc.with_(prefill_chunk=4 * sc.prefill_chunk), 64, hw)
    assert bigger.activations > m.activations and bigger.kv_budget == pytest.approx(m.kv_budget)
    b = max_batch(model, sc, hw)
    assert memory(model, sc, b, hw).fits and not memory(model, sc, b + 1, hw).fits


def test_engine_presets_set_their_fields_and_explicit_flags_win():
    hw = load_spec("h200")
    t = Scenario(dtype="fp8").for_hardware(hw)
    assert t.engine == "trtllm" and t.kv == "fp8" and t.attention_kernel == "trtllm" and t.mem_policy == "free"
    v = Scenario(engine="vllm", dtype="fp8").for_hardware(hw)
    assert v.kv == "bf16" and v.attention_kernel == "fa3" and v.mem_policy == "total" and v.rotary == "kernel"
    assert Scenario(engine="vllm", attention_kernel="flash", launch="eager").for_hardware(hw).attention_kernel == "flash"
    s = Scenario(engine="sglang", tp=8).for_hardware(hw)  # SGLang's rule of the GPU's memory (next test)
    assert (s.mem_policy, s.prefill_chunk, s.mem_fraction) == ("static", 8192, 0.897)
    assert Scenario().for_hardware(load_spec("mi300x")).engine == "vllm"
    with pytest.raises(InputError):
        Scenario(engine="trtllm").for_hardware(load_spec("mi300x"))
    for eng in ENGINES.values():
        assert {"attention", "prefill_chunk", "mem_fraction"} <= set(eng.sources), eng.key
    assert engine_for("auto", "amd").key == "vllm"


def test_fused_engine_decode_rmsnorm_is_a_kernel_not_a_row_walk():
    hw, model = load_spec("h200"), load_model("llama70b")
    prof = DEFAULTS.with_(row_s={**DEFAULTS.row_s, "rmsnorm": 1.6e-9}, rows_per_sm=9.0)
    fused = Scenario(engine="trtllm").for_hardware(hw)
    torch_ = Scenario(engine="torch").for_hardware(hw)
    t = {}
    for name, sc in (("fused", fused), ("torch", torch_)):
        ops = build_ops(model, Step("decode", 1, 1, 1024), resolve_scenario(sc, None, None))
        t[name] = time_op(next(o for o in ops if o.name == "attn.norm"), hw, prof).time
    assert t["fused"] < 0.5 * t["torch"]
    assert t["fused"] < 8e-6


def test_project_json_reports_engine_and_kernels():
    from perfmodel.serialize import projection_dict

    d = projection_dict(project("h200", "llama70b", engine="vllm", dtype="fp8"))
    assert d["engine"] == "vllm"
    assert d["kernels"]["attention"]["prefill"]["kernel"] == "fa3"
    # vLLM's FA3 measured on the H200 (its imported tables): timed as itself
    assert d["kernels"]["attention"]["prefill"]["carried"] is False
    assert d["calibration"]["families"]["attention"]["profile"] == "h200-sxm-vllm"
    assert d["kernels"]["engine"]["sources"]["mem_fraction"]
    # with this project's suite alone, FA3 is carried from cuDNN's measurement
    from perfmodel.paths import repo_root

    suite = load_profile(repo_root() / "calibration" / "h200")
    d = projection_dict(project("h200", "llama70b", engine="vllm", dtype="fp8", profile=suite))
    assert d["kernels"]["attention"]["prefill"]["carried"] is True
    assert d["kernels"]["attention"]["prefill"]["timed_as"] == "cudnn"


def test_attention_op_standalone_phase_follows_its_shape():
    hw, prof = load_spec("h200"), _cudnn_default_profile().with_(attn_default={"prefill": "flash", "decode": "cudnn"})
    dec = attention("a", 8, 32, 8, 1, 4096, 128, causal=False)
    pre = attention("a", 1, 32, 8, 4096, 4096, 128, causal=True)
    assert attention_kernel(dec, hw, prof).backend == "cudnn"
    assert attention_kernel(pre, hw, prof).backend == "flash"


def test_overlap_methods_in_projection_and_their_order():
    from perfmodel.projection import project as proj

    t = {ov: proj("h200", "llama70b", tp=8, overlap=ov).tpot_s for ov in (0.0, "none", 0.5, "stream")}
    assert t[0.0] == t["none"]
    assert t["stream"] < t["none"] and t[0.5] < t["none"]
    p = proj("h200", "llama70b", tp=8, overlap="stream")
    runs = [r for r, x in zip(p.decode.comm_runs, p.decode.times) if x.op.kind == "all_reduce"]
    assert runs and all(0 <= r <= x.time for r, x in zip(runs, [x for x in p.decode.times
                                                                 if x.op.kind == "all_reduce"]))
    with pytest.raises(InputError):
        Scenario(overlap="sideways").validated()


def test_workbook_follows_an_overlap_method(tmp_path):
    formulas = pytest.importorskip("formulas")
    pytest.importorskip("openpyxl")
    from perfmodel.cli import main

    out = tmp_path / "wb.xlsx"
    assert main(["export", "--arch", "h200", "--model", "llama8b", "--tp", "2", "--overlap", "stream",
                 "--out", str(out)]) == 0
    sol = formulas.ExcelModel().loads(str(out)).finish().calculate()
    vals = {str(k).upper(): v for k, v in sol.items()}
    cell = next(k for k in vals if k.endswith("DECODE_START'!B5"))
    from perfmodel.graph import Step
    from perfmodel.projection import evaluate_step
    from perfmodel.resolve import resolve_profile

    hw = load_spec("h200")
    model = load_model("llama8b")
    ph = evaluate_step(model, hw, resolve_scenario(Scenario(tp=2, overlap="stream"), hw, None), resolve_profile(None, hw),
                       Step("decode", 1, 1, 1024))
    assert float(vals[cell].value[0, 0]) == pytest.approx(ph.time_s, rel=1e-9)


@pytest.mark.parametrize("engine", ["trtllm", "vllm", "sglang"])
def test_wide_expert_parallelism_exchanges_by_all_to_all(engine):
    # attention DP over more GPUs than one node: the engines' wide-EP deployments run their all-to-all kernels
    # (Engine.wide_ep_all_to_all, an estimate with its source); within a node, and where the user says, the preset's
    from perfmodel.resolve import resolve_hardware, resolve_model

    hw = resolve_hardware("gb200")
    m = resolve_model("deepseek-v3")

    def exchange(**kw):
        sc = Scenario(**{"tp": 1, "dtype": "fp4", "engine": engine, **kw}).validated()
        return resolve_scenario(sc, hw, m).moe_exchange

    assert exchange(attention_dp=32, ep=32) == "all_to_all"
    assert exchange(attention_dp=16, ep=16) == "all_to_all"
    assert exchange(attention_dp=8, ep=8) == "gather"
    assert exchange(attention_dp=32, ep=32, moe_exchange="gather") == "gather"
    assert ENGINES[engine].sources["wide_ep"].startswith("estimate")


def test_the_projection_says_why_a_wide_layout_exchanges_by_all_to_all():
    from perfmodel.projection import project

    wide = project("gb200", "deepseek-v3", tp=1, attention_dp=32, ep=32, dtype="fp4", engine="sglang", batch=64)
    node = project("gb200", "deepseek-v3", tp=1, attention_dp=8, ep=8, dtype="fp4", engine="sglang", batch=64)
    said = [a for a in wide.assumptions if a.startswith("MoE exchange")]
    assert len(said) == 1 and "by all-to-all" in said[0] and "wide-EP deployments, an estimate" in said[0]
    assert not any("wide-EP" in a for a in node.assumptions)
