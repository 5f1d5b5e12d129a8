"""Each serving engine's own MoE all-to-all: the import of vLLM's and TensorRT-LLM's measured calls
(perfmodel.imports.aiconfigurator.convert_moe_a2a, convert_trtllm_alltoall), a fit per payload format and the
link bound (perfmodel.fit.deepep), the cost's lookup (perfmodel.cost.comm.fitted_kernel, linked_bytes), the
presets' kernels and payload formats (perfmodel.engines, perfmodel.graph.deepep_payload) and the committed
folders."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfmodel.cost.comm import deepep_time, fitted_kernel, linked_bytes
from perfmodel.engines import ENGINES
from perfmodel.fit.deepep import MAX_ETA, fit_deepep, fit_keys, solve
from perfmodel.graph import Step, build_ops, deepep_ll_dispatch_bytes, deepep_payload, payload_bytes
from perfmodel.imports.aiconfigurator import convert_moe_a2a, convert_trtllm_alltoall
from perfmodel.models import load_model
from perfmodel.profile import DEFAULTS, load_profile
from perfmodel.routing import ranks_per_token
from perfmodel.scenario import Scenario
from perfmodel.spec import load_spec

ROOT = Path(__file__).resolve().parents[1]
B200 = load_spec("b200")


def _a2a_table() -> dict[str, list]:
    """moe_a2a_perf columns: TensorRT-LLM's and vLLM's backends, every direction and format, one shape."""
    cols = {k: [] for k in ("comm_backend", "phase", "comm_dtype", "ep_size", "node_num", "hidden_size", "topk",
                            "num_experts", "num_tokens", "sms", "latency")}
    for backend, dtypes in (("trtllm_deepep_ll", ("bfloat16", "fp8", "nvfp4", "fp4")),
                            ("trtllm_deepep_ht", ("bfloat16", "nvfp4")), ("deepep_ll", ("default",)),
                            ("deepep_ht", ("default",)), ("deepep_v2_context", ("default",))):
        for phase in ("dispatch", "combine"):
            for dtype in dtypes:
                for k, v in (("comm_backend", backend), ("phase", phase), ("comm_dtype", dtype), ("ep_size", 8),
                             ("node_num", 1), ("hidden_size", 7168), ("topk", 8), ("num_experts", 256),
                             ("num_tokens", 64), ("sms", 20 if backend == "deepep_ht" else 0), ("latency", 50.0)):
                    cols[k].append(v)
    return cols


def test_moe_a2a_import_gives_each_call_the_bytes_of_its_payload():
    conv = convert_moe_a2a(_a2a_table())
    by = {(r["params"]["direction"], r["params"]["format"], r["params"].get("sms")): r for r in conv.rows}
    fp8, nvfp4, bf16 = (payload_bytes(7168, f) for f in ("fp8", "nvfp4", "bf16"))
    assert fp8 == 7168 + 224 and nvfp4 == 3584 + 448 and bf16 == 2 * 7168
    # low-latency: every routed pair a message (a 16-byte header out), in the table's format both ways
    assert by[("ll.dispatch", "fp8", None)]["params"]["bytes"] == 64 * 8 * deepep_ll_dispatch_bytes(7168, "fp8")
    assert by[("ll.combine", "fp8", None)]["params"]["bytes"] == 64 * 8 * fp8
    assert by[("ll.combine", "nvfp4", None)]["params"]["bytes"] == 64 * 8 * nvfp4  # "fp4": NVFP4's blocks
    # normal: a token once per rank holding any of its experts; vLLM's "default" format taken as bf16, its SMs kept
    copies = 64 * ranks_per_token(256, 8, 8)
    assert by[("normal.dispatch", "nvfp4", None)]["params"]["bytes"] == pytest.approx(copies * nvfp4)
    assert by[("normal.dispatch", "bf16", 20)]["params"]["bytes"] == pytest.approx(copies * bf16)
    assert all(r["time_s"] == pytest.approx(50e-6) for r in conv.rows)  # the table's microseconds
    # TensorRT-LLM's normal combine under NVFP4 experts is bf16 on the wire; DeepEP V2 is not a preset's kernel
    assert ("normal.combine", "nvfp4", None) not in by
    assert sum(n for why, n in conv.skipped.items() if "combine under NVFP4" in why) == 1
    assert sum(n for why, n in conv.skipped.items() if "deepep_v2_context" in why) == 2


def test_mnnvl_import_keeps_the_one_sided_kernel_with_its_copies_per_rank():
    cols = {k: [] for k in ("op_name", "kernel_source", "moe_dtype", "num_tokens", "hidden_size", "topk",
                            "num_experts", "moe_ep_size", "latency")}
    for kernel in ("NVLinkOneSided", "NVLinkTwoSided"):
        for op in ("alltoall_dispatch", "alltoall_combine", "alltoall_prepare"):
            for k, v in (("op_name", op), ("kernel_source", kernel), ("moe_dtype", "nvfp4"), ("num_tokens", 512),
                         ("hidden_size", 7168), ("topk", 8), ("num_experts", 256), ("moe_ep_size", 16),
                         ("latency", 0.05)):
                cols[k].append(v)
    conv = convert_trtllm_alltoall(cols)
    assert sorted(r["params"]["direction"] for r in conv.rows) == ["mnnvl.combine", "mnnvl.dispatch"]
    out = next(r for r in conv.rows if r["params"]["direction"] == "mnnvl.dispatch")
    back = next(r for r in conv.rows if r["params"]["direction"] == "mnnvl.combine")
    copies = 512 * ranks_per_token(256, 8, 16)
    assert out["params"]["bytes"] == pytest.approx(copies * payload_bytes(7168, "nvfp4"))
    assert back["params"]["format"] == "bf16" and back["params"]["bytes"] == pytest.approx(copies * 2 * 7168)
    assert out["time_s"] == pytest.approx(50e-6)  # milliseconds in this table
    assert sum(conv.skipped.values()) == 4  # the two-sided kernel's three calls, and the one-sided prepare


def _rows(direction: str, fmt: str | None, alpha: float, eta: float, *, ranks: int = 8, scale: float = 1.0,
          experts=(64, 256)) -> list[dict]:
    """deepep rows made from a fixed time and a bandwidth on the B200's link (bytes x ``scale`` per call)."""
    out = []
    for hidden in (4096, 7168):
        for tokens in (1, 8, 64, 512, 4096):
            for e in experts:
                nbytes = tokens * 8 * hidden * 2.0 * scale
                p = {"op": "deepep", "direction": direction, "nodes": 1, "ranks": ranks, "hidden": hidden,
                     "tokens": tokens, "top_k": 8, "experts": e, "bytes": nbytes}
                if fmt:
                    p["format"] = fmt
                t = alpha + linked_bytes(direction, nbytes, ranks) / (eta * B200.scaleup_bandwidth)
                out.append({"id": f"{direction}{fmt}{hidden}{tokens}{e}", "kind": "deepep", "params": p, "time_s": t})
    return out


def test_a_call_timed_in_several_formats_gets_a_fit_per_format():
    rows = (_rows("ll.dispatch", "bf16", 60e-6, 0.5) + _rows("ll.dispatch", "fp8", 70e-6, 0.3, scale=0.5)
            + _rows("ll.combine", "bf16", 30e-6, 0.6))
    keys = fit_keys(rows)
    assert set(keys.values()) == {"ll.dispatch@bf16", "ll.dispatch@fp8", "ll.combine"}
    prof, report = fit_deepep(DEFAULTS, rows, B200)
    assert prof.deepep_eta["ll.dispatch@fp8"] == pytest.approx(0.3, rel=1e-6)
    assert prof.deepep_alpha_s["ll.dispatch@bf16"] == pytest.approx(60e-6, rel=1e-6)
    assert prof.deepep_eta["ll.combine"] == pytest.approx(0.6, rel=1e-6)
    # a call is priced by its format's fit, else the call's one fit, else its bf16 fit
    assert fitted_kernel("ll.dispatch@fp8", prof.deepep_eta) == "ll.dispatch@fp8"
    assert fitted_kernel("ll.dispatch@nvfp4", prof.deepep_eta) == "ll.dispatch@bf16"
    assert fitted_kernel("ll.combine@fp8", prof.deepep_eta) == "ll.combine"
    assert fitted_kernel("normal.combine@bf16", prof.deepep_eta) is None
    assert deepep_time("normal.combine@bf16", 1e6, 256, B200, prof) is None


def test_a_fit_never_moves_bytes_faster_than_the_link_and_one_expert_count_fits_no_expert_term():
    rows = _rows("ll.dispatch", None, 40e-6, 3.0)  # flat in the bytes: three times the link's rate
    alpha, expert, eta = solve(rows, B200.scaleup_bandwidth)
    assert eta == MAX_ETA == 1.0
    def err(a, e):
        return np.mean([((a + e * r["params"]["experts"] + r["params"]["bytes"] / B200.scaleup_bandwidth)
                         / r["time_s"] - 1) ** 2 for r in rows])  # the fit's objective: squared relative error

    # the fixed and per-expert times refitted under the bound, not kept from the unbounded fit (40 us, none)
    assert err(alpha, expert) < err(40e-6, 0.0)
    one = _rows("ll.combine", None, 20e-6, 0.5, experts=(256,))
    a, e, eta = solve(one, B200.scaleup_bandwidth)
    assert e == 0.0 and a == pytest.approx(20e-6, rel=1e-6) and eta == pytest.approx(0.5, rel=1e-6)


def test_mnnvl_calls_are_fitted_and_priced_on_the_bytes_that_leave_the_rank():
    rows = [r for ep in (2, 4, 16) for r in _rows("mnnvl.dispatch", "nvfp4", 15e-6, 0.6, ranks=ep, experts=(256,))]
    prof, _ = fit_deepep(DEFAULTS, rows, B200)
    assert prof.deepep_eta["mnnvl.dispatch"] == pytest.approx(0.6, rel=1e-6)
    nbytes = 4e6
    want = 15e-6 + nbytes * 3 / 4 / (0.6 * B200.scaleup_bandwidth)
    assert deepep_time("mnnvl.dispatch@fp8", nbytes, 256, B200, prof, 4) == pytest.approx(want, rel=1e-6)
    assert linked_bytes("ll.dispatch", nbytes, 4) == nbytes  # DeepEP's fits count every copy, as they always did


def test_presets_pick_their_all_to_all_per_part_and_send_their_formats():
    trt, vllm, sglang = ENGINES["trtllm"], ENGINES["vllm"], ENGINES["sglang"]
    assert [trt.all_to_all_for(load_spec(p)) for p in ("h200-sxm", "b200", "gb200", "gb300")] == \
        ["deepep", "deepep", "mnnvl", "mnnvl"]
    assert sglang.all_to_all_for(load_spec("gb200")) == "deepep" and ENGINES["torch"].all_to_all_for(B200) == "per_rank"
    ds = load_model("deepseek-v3")

    def formats(engine, dtype):
        sc = Scenario(tp=1, attention_dp=8, ep=8, dtype=dtype, engine=engine).validated().for_hardware(B200)
        return {c: deepep_payload(ds, sc, c) for c in ("ll.dispatch", "ll.combine", "normal.dispatch",
                                                       "normal.combine", "mnnvl.dispatch", "mnnvl.combine")}

    assert formats("trtllm", "fp4") == {"ll.dispatch": "nvfp4", "ll.combine": "nvfp4", "normal.dispatch": "nvfp4",
                                        "normal.combine": "bf16", "mnnvl.dispatch": "nvfp4", "mnnvl.combine": "bf16"}
    assert formats("trtllm", "fp8")["normal.dispatch"] == "bf16"  # its high-throughput kernels: bf16 for fp8 models
    # vLLM: fp8 blocks only (DeepSeek-V3's checkpoint is block-scaled), bf16 for NVFP4 experts
    assert formats("vllm", "bf16")["ll.dispatch"] == "bf16" and formats("vllm", "fp8")["ll.dispatch"] == "fp8"
    assert formats("vllm", "fp4")["normal.dispatch"] == "bf16" and formats("sglang", "fp4")["normal.dispatch"] == "fp8"
    tensor = load_model("qwen3-30b-a3b")  # per-tensor fp8 scaling
    sc = Scenario(tp=1, attention_dp=8, ep=8, dtype="fp8", engine="vllm").validated().for_hardware(B200)
    assert tensor.fp8_scaling == "tensor" and deepep_payload(tensor, sc, "ll.dispatch") == "bf16"
    assert formats("sglang", "bf16")["ll.dispatch"] == "fp8"  # SGLang quantizes its low-latency dispatch always
    assert formats("sglang", "bf16")["normal.dispatch"] == "bf16"


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_every_presets_payload_rule_gives_a_format(engine):
    """Each call a preset names a rule for resolves to a payload format at every experts' format (an unknown rule
    would stop the projection)."""
    from perfmodel.graph import PAYLOAD_FORMATS

    ds = load_model("deepseek-v3")
    for dtype in ("bf16", "fp8", "fp4"):
        sc = Scenario(tp=1, attention_dp=8, ep=8, dtype=dtype, engine=engine).validated().for_hardware(B200)
        for call in ENGINES[engine].a2a_payload:
            assert deepep_payload(ds, sc, call) in PAYLOAD_FORMATS, (engine, dtype, call)


def test_a_step_sends_the_engines_payload_to_the_engines_kernel():
    """DeepSeek-V3 in NVFP4 under TensorRT-LLM on a B200: a prefill's normal dispatch NVFP4 once per rank, its
    combine bf16; each call names its payload's format."""
    sc = Scenario(tp=1, attention_dp=8, ep=8, dtype="fp4", engine="trtllm",
                  moe_exchange="all_to_all").validated().for_hardware(B200)
    ops = {op.name: op for op in build_ops(load_model("deepseek-v3"), Step("prefill", 8, 512, 0), sc)}
    from perfmodel.routing import copies_per_token

    copies = 512 * copies_per_token(load_model("deepseek-v3").moe, 8)
    assert ops["moe.dispatch"].params["kernel"] == "normal.dispatch@nvfp4"
    assert ops["moe.dispatch"].bytes == pytest.approx(copies * payload_bytes(7168, "nvfp4"))
    assert ops["moe.combine"].params["kernel"] == "normal.combine@bf16"
    assert ops["moe.combine"].bytes == pytest.approx(copies * 2 * 7168)


def test_each_engine_takes_its_own_deepep_fit():
    from perfmodel.resolve import resolve_hardware, resolve_profile

    want = {("sglang", "h200-sxm"): "h200-sxm-sglang", ("vllm", "h200-sxm"): "h200-sxm-vllm",
            ("trtllm", "h200-sxm"): "h200-sxm-trtllm", ("trtllm", "gb200"): "gb200-trtllm",
            ("sglang", "gb200"): "b200-sglang", ("vllm", "gb200"): "b200-vllm"}  # the engine's, from its family
    for (engine, part), folder in want.items():
        prof = resolve_profile(None, resolve_hardware(part), engine)
        assert prof.provenance["families"]["deepep"]["profile"] == folder, (engine, part)


FOLDERS = ("h100-sxm-vllm", "h200-sxm-vllm", "b200-vllm", "b300-vllm", "h100-sxm-trtllm", "h200-sxm-trtllm",
           "b200-trtllm", "b300-trtllm", "gb200-trtllm", "gb300-trtllm")


@pytest.mark.parametrize("folder", FOLDERS)
def test_committed_engine_fits_reproduce_their_rows(folder):
    """Each vLLM and TensorRT-LLM folder's all-to-all fits: the same as a refit of its rows, every call of its
    table fitted (TensorRT-LLM's low-latency dispatch on the GB200 and GB300 excepted: flat in its bytes) and
    within 30% at the median on the shapes each fit held out (docs/collectives.md prints them)."""
    from perfmodel.measure.store import read_rows

    prof = load_profile(ROOT / "calibration" / folder)
    assert "deepep" in prof.provenance["measured_families"]
    rows = read_rows(ROOT / "calibration" / folder / "measurements.jsonl.gz")
    refit, report = fit_deepep(DEFAULTS, rows, load_spec(prof.spec_key))
    assert refit.deepep_eta == pytest.approx(prof.deepep_eta, rel=1e-9)
    assert refit.deepep_alpha_s == pytest.approx(prof.deepep_alpha_s, rel=1e-9, abs=1e-15)
    calls = {k.partition("@")[0] for k in report}
    flat = folder.startswith("gb") and folder.endswith("trtllm")
    assert calls == ({"ll.combine", "normal.dispatch", "normal.combine"} if flat else
                     {"ll.dispatch", "ll.combine", "normal.dispatch", "normal.combine"}) | (
        {"mnnvl.dispatch", "mnnvl.combine"} if folder == "gb200-trtllm" else set())
    for key, f in report.items():
        assert f["held_out"]["n"] >= 10 and f["held_out"]["median_abs_error"] < 0.30, (key, f["held_out"])
