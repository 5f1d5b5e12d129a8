"""What a user changes moves the answer (issue 26): a spec that extends a part is that part with the figures it
changes, calibrated by the part's measurements; derived figures follow what they derive from; a YAML what-if
and a sweep of the same figure agree; and, generated, raising any figure of any shipped part never slows a
projection."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from perfmodel import project
from perfmodel.resolve import resolve_hardware, resolve_profile
from perfmodel.spec import SPEC_FIELDS, list_specs, load_spec, spec_with


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return p


def test_a_yaml_what_if_moves_the_answer_as_the_sweep_does(tmp_path):
    """README's what-if: extends the H200 with twice its HBM bandwidth. The YAML file and `sweep --vary` of the
    same figure give the same projection; the parent's calibration (and its measured tables) stay in force."""
    h200 = load_spec("h200-sxm")
    spec = _write(tmp_path, "h200-2x", "extends: h200-sxm\nname: H200 with 2x HBM\n"
                                       "memory:\n  bandwidth: {value: 9.6 TB/s, source: estimate, note: what-if}\n")
    by_yaml = project(str(spec), "llama8b")
    by_sweep = project(spec_with(h200, hbm_bandwidth=9.6e12), "llama8b")
    base = project(h200, "llama8b")
    assert by_yaml.tpot_s == pytest.approx(by_sweep.tpot_s, rel=1e-9)
    assert by_yaml.ttft_s == pytest.approx(by_sweep.ttft_s, rel=1e-9)
    assert by_yaml.tpot_s < base.tpot_s * (1 - 1 / 3)  # a memory-bound decode: twice the bandwidth, a third off
    assert by_yaml.profile.label == base.profile.label
    assert any("extends h200-sxm" in a for a in by_yaml.assumptions)


def test_two_specs_that_differ_only_in_name_give_the_same_answer(tmp_path):
    renamed = _write(tmp_path, "my-part", "extends: b200\nname: Somebody's B200\n")
    for model, kw in (("llama70b", {}), ("mixtral", {"tp": 2, "dtype": "fp8", "batch": 8})):
        a, b, c = project("b200", model, **kw), project(str(renamed), model, **kw), project("blackwell", model, **kw)
        for p in (b, c):
            assert (p.ttft_s, p.tpot_s) == pytest.approx((a.ttft_s, a.tpot_s), rel=1e-12)
            assert p.bands == a.bands


def test_a_what_if_h100_keeps_the_h100s_calibration(tmp_path):
    """An H100 with the H200's bandwidth is an H100 with faster memory, not an H200 (issue 26)."""
    spec = _write(tmp_path, "h100-fast", "extends: h100-sxm\nname: H100 at 4.8 TB/s\n"
                                         "memory:\n  bandwidth: {value: 4.8 TB/s, source: estimate}\n")
    hw = resolve_hardware(str(spec))
    prof = resolve_profile(None, hw)
    assert prof.provenance["families"]["gemm"]["part"] == "h100-sxm"
    assert not prof.provenance["families"]["gemm"]["carried"]


def test_derived_figures_follow_what_they_derive_from(tmp_path):
    """An inherited sustained ceiling is a share of its datasheet figure: a child that changes the figure and not
    the ceiling keeps the share, and the figure says so."""
    h200 = load_spec("h200-sxm")
    spec = load_spec(_write(tmp_path, "h200-bw", "extends: h200-sxm\nname: x\n"
                                                 "memory:\n  bandwidth: {value: 9.6 TB/s, source: estimate}\n"))
    assert spec.sustained["bandwidth"] == pytest.approx(h200.sustained["bandwidth"] * 2.0)
    fig = spec.figures["sustained.bandwidth"]
    assert fig.source == "derived" and "memory.bandwidth" in fig.ref
    assert spec.sustained["bf16"] == h200.sustained["bf16"]  # what does not depend on it stays
    # a child that restates the ceiling keeps its own
    own = load_spec(_write(tmp_path, "h200-own", "extends: h200-sxm\nname: y\nmemory:\n"
                                                 "  bandwidth: {value: 9.6 TB/s, source: estimate}\n"
                                                 "sustained:\n  bandwidth: {value: 5 TB/s, source: estimate}\n"))
    assert own.sustained["bandwidth"] == pytest.approx(5e12)


def test_the_sweep_takes_the_yaml_name_of_a_figure():
    from perfmodel.errors import InputError
    from perfmodel.outputs.sweep import parse_vary

    assert parse_vary("memory.bandwidth=4TB/s,8TB/s").field == "hbm_bandwidth"
    assert parse_vary("compute.tensor.bf16=1000TFLOPS").field == "tensor_flops.bf16"
    with pytest.raises(InputError) as e:
        parse_vary("memory.bandwith=4TB/s")
    assert "memory.bandwidth" in str(e.value) and "hbm_bandwidth" in str(e.value)


# --- generated: raising a figure never slows a projection ------------------------------------------------------

# Figures where more is better, by their spec_with field (a part's tensor rates raised together: "tensor");
# latencies are lowered instead. The SM count scales the dense rates with it (perfmodel.spec.DERIVED).
RAISE = ["tensor"] + [f.attr for f in SPEC_FIELDS if f.dimension in ("flop_rate", "bandwidth", "frequency", "count",
                                                                     "bytes", "power")
                      and not f.attr.startswith("tensor_flops.") and f.attr not in ("scaleup_domain",
                                                                                     "hbm_visible_bytes")]
LOWER = [f.attr for f in SPEC_FIELDS if f.dimension == "time"]
PARTS = sorted(s.key for s in list_specs() if s.vendor == "nvidia")
SCENARIOS = [("llama8b", {}), ("llama70b", {"tp": 4, "batch": 16, "dtype": "fp8"}),
             ("mixtral", {"tp": 2, "batch": 8})]
# The two large departures this suite found are fixed (docs/what-if.md): more SMs slowed a skinny decode GEMM
# (+4.8% at 4x: the tiles in flight a stream needs were counted per SM, now per byte per second by Little's law),
# and a bf16 rate alone slowed fp8 products on a carried profile (+10% on the H20). One small one is bounded: the
# GEMM model's split-K heuristic splits K until the SMs are full, so more SMs write more fp32 partial sums where
# the split no longer helps (a library picks the split by its predicted time); +0.32% at worst over every NVIDIA
# part, three scenarios and 1.25-4x the SMs (docs/tools/what_if_table.py).
# And one the suite exposed once a what-if kept its part's evidence (perfmodel.spec.library_part): the power-
# limited clock of a step is set by its demand at boost-clock times, so more HBM bandwidth on a part whose power
# binds (the H20: 400 W for 4 TB/s) raises the demand and slows the compute part of every GEMM by more than the
# memory part gained; +14.2% TPOT at 2.15x the H20's bandwidth, the worst docs/tools/what_if_table.py's scan finds
# (docs/what-if.md, generated: why the measured clock course keeps the rule rather than a fixed point).
EXACT = 1e-9
KNOWN = {"sm_count": 0.005, "hbm_bandwidth": 0.16}


def _better(hw, attr: str, factor: float):
    if attr == "tensor":
        return spec_with(hw, tensor_flops={k: v * factor for k, v in hw.tensor_flops.items()})
    value = getattr(hw, attr)
    new = value / factor if attr in LOWER else value * factor
    return spec_with(hw, **{attr: float(math.ceil(new)) if attr == "sm_count" else new})


def _times(hw, model, kw):
    from perfmodel.errors import InputError

    try:
        p = project(hw, model, **kw)
    except InputError as e:  # a layout that does not fit a part is no case of this test
        if "fit" in str(e):
            return None
        raise
    return p.ttft_s, p.tpot_s


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(part=st.sampled_from(PARTS), attr=st.sampled_from(RAISE + LOWER), factor=st.floats(1.05, 4.0),
       case=st.sampled_from(range(len(SCENARIOS))))
def test_a_better_figure_never_slows_a_projection(part, attr, factor, case):
    hw = load_spec(part)
    model, kw = SCENARIOS[case]
    a, b = _times(hw, model, kw), _times(_better(hw, attr, factor), model, kw)
    if a is None or b is None:
        return
    slack = 1 + KNOWN.get(attr, EXACT)
    assert b[0] <= a[0] * slack and b[1] <= a[1] * slack, (part, attr, factor, model, a, b)


STEPS = [("llama70b", "decode", 64, 4096, {"tp": 4, "dtype": "fp8"}), ("mixtral", "prefill", 2, 0, {"tp": 2}),
         ("deepseek-v3", "decode", 32, 2048, {"tp": 8, "dtype": "fp8"})]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(part=st.sampled_from(PARTS), attr=st.sampled_from(RAISE + LOWER), factor=st.floats(1.05, 4.0),
       case=st.sampled_from(range(len(STEPS))))
def test_a_better_figure_never_slows_a_step(part, attr, factor, case):
    """`perfmodel step`: one forward step, every op priced, at a context (decode) or a prompt (prefill)."""
    from perfmodel import step
    from perfmodel.errors import InputError

    model, phase, batch, context, kw = STEPS[case]
    hw = load_spec(part)
    try:
        a = step(hw, model, phase, batch, context=context, **kw).time_s
    except InputError:  # a format the part cannot run, a layout that does not fit: no case
        return
    b = step(_better(hw, attr, factor), model, phase, batch, context=context, **kw).time_s
    assert b <= a * (1 + KNOWN.get(attr, EXACT)), (part, attr, factor, STEPS[case], a, b)


TRAININGS = [("llama8b", {"gpus": 8, "tp": 2, "global_batch": 64, "seq": 4096}),
             ("mixtral", {"gpus": 16, "tp": 2, "pp": 2, "ep": 4, "global_batch": 64, "seq": 4096}),
             ("llama70b", {"gpus": 64, "tp": 8, "pp": 4, "global_batch": 128, "seq": 8192, "dtype": "fp8"})]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(part=st.sampled_from(PARTS), attr=st.sampled_from(RAISE + LOWER), factor=st.floats(1.05, 4.0),
       case=st.sampled_from(range(len(TRAININGS))))
def test_a_better_figure_never_slows_a_training_step(part, attr, factor, case):
    from perfmodel.errors import InputError
    from perfmodel.train import project_train

    model, kw = TRAININGS[case]
    hw = load_spec(part)
    try:
        a = project_train(hw, model, **kw).step_time_s
    except InputError:
        return
    b = project_train(_better(hw, attr, factor), model, **kw).step_time_s
    assert b <= a * (1 + KNOWN.get(attr, EXACT)), (part, attr, factor, TRAININGS[case], a, b)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(part=st.sampled_from(["h200-sxm", "b200", "h100-sxm", "l40s"]),
       attr=st.sampled_from(["tensor", "hbm_bandwidth", "sm_count", "boost_clock_hz", "scaleup_bandwidth"]),
       factor=st.floats(1.05, 4.0))
def test_a_better_figure_never_slows_a_served_load(part, attr, factor):
    """`perfmodel serve`: the same requests on a better part finish no later on the whole: mean TTFT and E2E
    latency never rise (a request-level simulation may reorder single requests, so single ones are not compared)."""
    from perfmodel.resolve import resolve_profile, resolve_model
    from perfmodel.scenario import Scenario
    from perfmodel.resolve import resolve_scenario as for_hardware
    from perfmodel.serve.simulate import simulate
    from perfmodel.serve.workload import parse_dist, synthetic_requests

    reqs = synthetic_requests(150, 8.0, parse_dist("1024", field="isl"), parse_dist("128", field="osl"), seed=3)
    model = resolve_model("llama8b")

    def served(hw):
        return simulate(hw, model, for_hardware(Scenario(batch="max"), hw, model).validated(), resolve_profile(None, hw),
                        reqs)

    hw = load_spec(part)
    a, b = served(hw), served(_better(hw, attr, factor))
    for metric in ("ttft_ms", "e2e_ms"):
        assert b[metric]["mean"] <= a[metric]["mean"] * (1 + KNOWN.get(attr, 1e-6)), (part, attr, factor, metric)


def test_one_formats_rate_does_not_slow_another_formats_products():
    """Found by the suite: raising the bf16 rate alone slowed fp8 decode on a part whose profile is carried
    (the tile-efficiency constant carried with the bf16 rate per SM per clock), by 10% on the H20; each format's
    products now follow their own rate (perfmodel.transfer: ``gemm_tile_c_fmt``)."""
    kw = {"tp": 4, "batch": 16, "dtype": "fp8"}
    for part, bound in (("h200-sxm", EXACT), ("b200", EXACT), ("h20", EXACT)):
        hw = load_spec(part)
        a = project(hw, "llama70b", **kw).tpot_s
        b = project(spec_with(hw, **{"tensor_flops.bf16": hw.tensor_flops["bf16"] * 1.5}), "llama70b", **kw).tpot_s
        assert b <= a * (1 + bound), part


@pytest.mark.parametrize("part", ["h200-sxm", "b200", "mi300x"])
def test_a_band_contains_its_p50(part):
    p = project(part, "llama70b", tp=4, batch=8)
    for metric, (lo, mid, hi) in p.bands.items():
        assert lo <= mid <= hi, metric
    assert np.isfinite(p.ttft_s)


@pytest.mark.parametrize("tag, function", [
    ("what-if-examples", "examples"),
    # the scan of every figure of every part (5-8 s), registered slow in docs/tools/regenerate.py
    pytest.param("what-if-departures", "departures", marks=pytest.mark.slow),
])
def test_docs_what_if_tables_are_regenerated(generated_block, tag, function):
    doc, now = generated_block("what-if.md", tag, "what_if_table.py", function)
    assert doc == now, f"run python docs/tools/what_if_table.py and paste it into docs/what-if.md ({tag})"


def test_the_bandwidth_allowance_covers_the_documented_worst_case():
    """docs/what-if.md's generated departures (checked against the scan in the slow tier) state the worst TPOT
    change more bandwidth gives; the property test above allows it with room between the scan's factors."""
    import re

    from perfmodel.paths import repo_root

    doc = (repo_root() / "docs" / "what-if.md").read_text()
    row = next(x for x in doc.splitlines() if x.startswith("| more HBM bandwidth"))
    worst = float(re.search(r"\| ([+-][0-9.]+)% \|$", row).group(1)) / 100
    assert 0 < worst < KNOWN["hbm_bandwidth"] - 0.01
