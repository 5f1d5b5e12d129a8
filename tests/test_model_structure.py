"""Structural behaviour of the latency model: what each mechanism must do, whatever its fitted values."""
from __future__ import annotations
from perfmodel.resolve import resolve_scenario

import pytest

from perfmodel import ops as O
from perfmodel.cost import time_op, time_ops
from perfmodel.graph import Step, build_ops
from perfmodel.models import load_model
from perfmodel.paths import repo_root
from perfmodel.profile import DEFAULTS, load_profile
from perfmodel.projection import evaluate_step, project
from perfmodel.resolve import resolve_profile
from perfmodel.scenario import Scenario
from perfmodel.spec import load_spec
from perfmodel.transfer import CROSS_VENDOR_SPREAD, carry

H200 = load_spec("h200")


@pytest.fixture(scope="module")
def fitted():
    return load_profile("calibration/h200")


def test_standalone_pays_more_than_in_stream(fitted):
    for op in (O.gemm("g", 1, 4096, 4096, "bf16"), O.gemm("g", 4096, 4096, 4096, "bf16"),
               O.rmsnorm("n", 8, 4096, "bf16"), O.swiglu("s", 64, 14336, "bf16"), O.copy("c", 2**24),
               O.attention("a", 8, 32, 8, 1, 4096, 128, causal=False)):
        inside = time_op(op, H200, fitted).time
        alone = time_op(op, H200, fitted, standalone=True).time
        assert alone >= inside + fitted.standalone_overhead_s * 0.999, op.name


def test_standalone_never_beats_the_host_floor(fitted):
    for kind, floor in fitted.host_floor_s.items():
        op = {"rotary": O.rotary("r", 1, 32, 128, "bf16"), "rmsnorm": O.rmsnorm("n", 1, 4096, "bf16"),
              "swiglu": O.swiglu("s", 1, 4096, "bf16"), "residual": O.residual("x", 1, 4096, "bf16"),
              "copy": O.copy("c", 4096)}.get(kind)
        if op is not None:
            assert time_op(op, H200, fitted, standalone=True).time >= floor


def test_misaligned_gemm_is_slower_than_its_aligned_neighbour(fitted):
    aligned = time_op(O.gemm("g", 4096, 4096, 4096, "bf16"), H200, fitted).time
    odd = time_op(O.gemm("g", 4096, 4097, 4096, "bf16"), H200, fitted).time
    assert odd > 2 * aligned


def test_rmsnorm_row_latency_grows_with_width(fitted):
    narrow = time_op(O.rmsnorm("n", 1, 2048, "bf16"), H200, fitted).time
    wide = time_op(O.rmsnorm("n", 1, 16384, "bf16"), H200, fitted).time
    assert wide > 1.5 * narrow


def test_sustained_compute_slows_gemms_of_a_long_step(fitted):
    model = load_model("llama8b")
    ops = build_ops(model, Step("prefill", 1, 1024, 0), resolve_scenario(Scenario(kernels="torch"), None, None))
    alone = {o.name: time_op(o, H200, fitted).time for o in ops if o.kind == "gemm"}
    stepped = {t.op.name: t.time for t in time_ops(ops, H200, fitted) if t.op.kind == "gemm"}
    assert all(stepped[k] >= alone[k] for k in alone)
    assert stepped["ffn.down"] > alone["ffn.down"] * 1.01


def test_kernels_switch_changes_the_operator_list():
    model = load_model("llama8b")
    step = Step("decode", 4, 1, 512)
    torch_ops = {o.name for o in build_ops(model, step, resolve_scenario(Scenario(kernels="torch"), None, None))}
    fused_ops = {o.name for o in build_ops(model, step, resolve_scenario(Scenario(kernels="fused"), None, None))}
    assert {"attn.rotary_q", "attn.rotary_k", "attn.residual", "ffn.residual"} <= torch_ops
    assert not fused_ops & {"attn.rotary_q", "attn.rotary_k", "attn.residual", "ffn.residual"}


def test_fused_decode_attention_does_not_pad_query_rows(fitted):
    plain = O.attention("a", 64, 32, 32, 1, 4096, 128, causal=False)
    packed = O.Op(plain.name, plain.kind, plain.phase, plain.flops, plain.bytes, {**plain.params, "packed": True})
    assert time_op(packed, H200, fitted).compute < time_op(plain, H200, fitted).compute / 10


def test_launch_auto_graphs_decode_and_not_prefill(fitted):
    model = load_model("llama8b")
    sc = Scenario(kernels="torch")
    assert sc.launch_for("decode") == "graph" and sc.launch_for("prefill") == "eager"
    eager = evaluate_step(model, H200, resolve_scenario(sc.with_(launch="eager"), H200, None), fitted, Step("decode", 1, 1, 512))
    graph = evaluate_step(model, H200, resolve_scenario(sc, H200, None), fitted, Step("decode", 1, 1, 512))
    assert eager.time_s > graph.time_s


def test_own_profile_is_used_and_carried_elsewhere(fitted):
    # plain PyTorch on the H200: this project's own suite measured every family there
    own = resolve_profile(None, H200, "torch")
    assert own.name == "h200" and not own.carried_from and own.gemm_eta == fitted.gemm_eta
    b200 = load_spec("b200")
    # on a B200 the GEMMs come from the part's own measurements (imported engine tables, same part first);
    # the families only the H200 suite measured (memory kernels, launches, training, power) are carried
    mixed = resolve_profile(None, b200, "torch")
    fams = mixed.provenance["families"]
    assert fams["gemm"]["part"] == "b200" and not fams["gemm"]["carried"]
    assert fams["memory"]["part"] == "h200-sxm" and fams["memory"]["carried"]
    clock = H200.boost_clock_hz / b200.boost_clock_hz
    assert mixed.mem_alpha_s["copy"] == pytest.approx(fitted.mem_alpha_s["copy"] * clock)
    # the H200 profile alone, carried by the transfer rules
    carried = resolve_profile(repo_root() / "calibration" / "h200", b200)
    assert carried.carried_from == "h200-sxm" and carried.carry_spread > 0
    assert carried.gemm_overhead_s == pytest.approx(fitted.gemm_overhead_s * clock)
    assert resolve_profile("none", b200) is DEFAULTS
    amd = carry(fitted, H200, load_spec("mi300x"))
    assert not amd.fitted and amd.carry_spread == CROSS_VENDOR_SPREAD
    p = project("b200", "llama70b", isl=512, osl=64)
    assert "carried" in p.profile.label


def test_carried_band_is_wider_than_own(fitted):
    own = project("h200", "llama70b", isl=512, osl=64, batch=8, dtype="fp8")
    other = project("b200", "llama70b", isl=512, osl=64, batch=8, dtype="fp8")
    width = lambda p: p.bands["tpot_ms"][2] / p.bands["tpot_ms"][0]  # noqa: E731
    assert width(other) > width(own)
