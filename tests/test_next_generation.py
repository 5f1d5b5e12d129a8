"""Projecting a part from the best evidence: family-wise profile choice, the carry relative to sustained
ceilings, the kernel-level backtest and the sustained-ceiling procedure."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfmodel.profile import load_profile
from perfmodel.resolve import resolve_profile
from perfmodel.spec import load_spec
from perfmodel.transfer import carry, sustained_ratios

ROOT = Path(__file__).resolve().parent.parent
H200, B200, B300 = load_spec("h200-sxm"), load_spec("b200"), load_spec("b300")


def test_each_family_comes_from_its_best_evidence():
    prof = resolve_profile(None, B200, "trtllm")
    fams = prof.provenance["families"]
    # the part's own engine tables for the engine's kernels, measured not carried
    for fam in ("gemm", "attention", "comm", "moe"):
        assert fams[fam]["profile"] == "b200-trtllm" and not fams[fam]["carried"], fam
    # families only this project's suite measured come from the H200, carried
    for fam in ("memory", "launch", "training", "power"):
        assert fams[fam]["part"] == "h200-sxm" and fams[fam]["carried"], fam
    assert prof.label.startswith("b200-trtllm + h200 carried")
    # a part nobody measured: the engine's tables of the nearest generation, carried (Rubin from Blackwell Ultra)
    rubin = resolve_profile(None, load_spec("rubin-estimate"), "trtllm")
    assert rubin.provenance["families"]["gemm"]["part"] in ("b300", "gb300")
    assert rubin.carried_from and rubin.carry_spread > 0


def test_plain_pytorch_on_the_h200_is_its_own_suite_where_it_measured():
    prof = resolve_profile(None, H200, "torch")
    fams = prof.provenance["families"]
    assert prof.name == "h200" and not prof.carried_from
    for fam in ("gemm", "attention", "memory", "launch", "training", "power"):
        assert fams[fam]["profile"] == "h200", fam
    # what the suite could not measure on one GPU comes from the same part's engine tables, not carried
    for fam in ("comm", "moe"):
        assert fams[fam]["part"] == "h200-sxm" and not fams[fam]["carried"], fam


def test_the_engine_attention_kernel_is_timed_as_itself_where_measured():
    from perfmodel.kernel_choices import choices
    from perfmodel.resolve import resolve_scenario
    from perfmodel.scenario import Scenario

    prof = resolve_profile(None, B200, "trtllm")
    ch = choices(B200, resolve_scenario(Scenario(engine="trtllm").validated(), B200, None), prof)
    assert ch["attention"]["decode"]["timed_as"] == "trtllm" and not ch["attention"]["decode"]["carried"]


def test_carry_scales_efficiencies_by_the_sustained_share():
    src = load_profile(ROOT / "calibration" / "h200-sxm-trtllm")
    ratios = sustained_ratios(H200, B200)
    expect = (B200.sustained["bf16"] / B200.tensor_flops["bf16"]) / (H200.sustained["bf16"] / H200.tensor_flops["bf16"])
    assert ratios["bf16"] == pytest.approx(expect)
    with_s = carry(src, H200, B200)
    without = carry(src, H200, B200, sustained=False)
    assert with_s.gemm_eta["bf16"] == pytest.approx(without.gemm_eta["bf16"] * ratios["bf16"])
    assert with_s.comm_alpha_s["all_reduce:4"] == pytest.approx(without.comm_alpha_s["all_reduce:4"]
                                                                 * ratios["allreduce_latency"])
    # fp4, never measured on an H200: its fp8 efficiency, scaled by B200's fp4 share over the H200's fp8 share
    assert with_s.gemm_eta["fp4"] == pytest.approx(src.gemm_eta["fp8"] * ratios["fp4_from_fp8"])
    # a target whose spec gives no sustained figure keeps the datasheet rule
    bare = dataclasses.replace(B200, sustained={})
    assert carry(src, H200, bare).gemm_eta["bf16"] == without.gemm_eta["bf16"]
    # Blackwell Ultra doubles the SFU's exponential rate: softmax cycles halve, Blackwell keeps them
    assert carry(src, H200, B300).attn_sfu_cycles["trtllm"] == pytest.approx(src.attn_sfu_cycles["trtllm"] / 2)
    assert carry(src, H200, B200).attn_sfu_cycles["trtllm"] == pytest.approx(src.attn_sfu_cycles["trtllm"])


def test_backtest_reports_every_family_and_the_own_profile():
    from perfmodel.backtest import backtest, markdown, summary_by_family

    r = backtest(ROOT / "calibration" / "h200-sxm-trtllm", ROOT / "calibration" / "b200-trtllm")
    fams = summary_by_family(r)
    for fam in ("gemm bf16", "gemm fp4", "attention decode", "attention prefill", "moe fp4", "collectives latency"):
        assert fam in fams, fam
        assert set(fams[fam]) == {"datasheet", "sustained", "own"}
    # measuring the part beats carrying to it, for the GEMMs of every format
    for fmt in ("bf16", "fp8", "fp4"):
        f = fams[f"gemm {fmt}"]
        assert f["own"]["median_abs_error"] < f["sustained"]["median_abs_error"]
    assert "carried, target's sustained ceilings (not blind)" in markdown([r])


def test_sustained_ceilings_read_off_a_folder():
    from perfmodel.sustained import measure, yaml_text

    fig = measure(ROOT / "calibration" / "b200-trtllm")
    assert set(fig) >= {"bf16", "fp8", "fp4", "bandwidth", "allreduce_busbw", "allreduce_latency"}
    assert 0.4 * B200.tensor_flops["bf16"] < fig["bf16"][0] < B200.tensor_flops["bf16"]
    assert 0.5 * B200.hbm_bandwidth < fig["bandwidth"][0] < B200.hbm_bandwidth
    text = yaml_text(fig)
    assert text.startswith("sustained:") and "source: measured" in text
    # the spec library carries exactly these figures (regenerate with `perfmodel sustained`)
    assert B200.sustained["bf16"] == pytest.approx(fig["bf16"][0], rel=0.005)


def test_every_shipped_sustained_block_is_what_perfmodel_sustained_prints():
    """Issue 26: the specs' measured ceilings are reproduced by the one procedure (no drift), and none passes its
    datasheet figure (an H100 read 4.51 TB/s of 3.35 when MLA's rows counted: they are left out)."""
    import re

    from perfmodel.spec import load_spec
    from perfmodel.sustained import measure, yaml_text

    seen = 0
    for y in sorted((ROOT / "hardware").glob("*.yaml")):
        block = re.search(r"^sustained:\n(?:[ ].*\n)*", y.read_text(), re.M)
        folders = set(re.findall(r'ref: "([\w.-]+): measured', block.group(0))) if block else set()
        if not folders:
            continue
        (folder,) = folders
        assert block.group(0) == yaml_text(measure(ROOT / "calibration" / folder)), y.name
        spec = load_spec(y.stem)
        # known, not fixed: the A100 table's GQA decode rows read 2.6-3.0 TB/s of a 2.04 TB/s part (its MHA rows
        # 1.68), so its ceiling reads 2.37 TB/s; the row's KV-head count is suspect (docs/what-if.md)
        if y.stem != "a100-sxm-80gb":
            assert spec.sustained["bandwidth"] < spec.hbm_bandwidth, y.name
        for fmt in ("bf16", "fp8", "fp4"):
            if fmt in spec.sustained:
                assert spec.sustained[fmt] < spec.tensor_flops[fmt], (y.name, fmt)
        seen += 1
    assert seen >= 7
