"""A serving engine's own host work a step (scheduling, KV-block bookkeeping, output handling): the measured figures
behind the vLLM preset, and how a step takes them (perfmodel.step_accounting.with_scheduler)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from perfmodel.engines import ENGINES, SGLANG_SCHEDULER_HOST, VLLM_SCHEDULER_HOST, async_scheduling_for
from perfmodel.paths import calibration_dir
from perfmodel.step_accounting import scheduler_rules, with_scheduler

RESULTS = calibration_dir() / "engine-host" / "vllm" / "results.json"
SGLANG_RESULTS = calibration_dir() / "engine-host" / "sglang" / "results.json"


def _medians_match(knots, measured: dict[int, float]) -> None:
    """The preset's curve is the committed run's medians, to the 0.1 us they are typed to."""
    assert [n for n, _ in knots] == sorted(measured)
    for n, seconds in knots:
        assert abs(seconds - measured[n]) < 0.051e-6, (n, seconds, measured[n])


def test_the_preset_is_the_committed_measurement():
    """The vLLM preset's curve: the engine core's per-step medians against the running sequences, per scheduling
    mode, as the committed results give them (no figure typed in by hand)."""
    doc = json.loads(RESULTS.read_text())
    assert doc["env"]["vllm"] == "0.34.0"
    for mode in ("sync", "async"):
        pooled = doc["pooled"][mode]
        _medians_match(VLLM_SCHEDULER_HOST[mode],
                       {int(b): pooled[b]["engine_core_sum"]["wall_median_s"] for b in pooled})
    assert ENGINES["vllm"].scheduler_host == VLLM_SCHEDULER_HOST
    assert "calibration/engine-host/vllm" in ENGINES["vllm"].sources["scheduler_host"]


def test_the_sglang_preset_is_its_measurement():
    """SGLang's scheduler thread: its per-step medians, overlap scheduler (async, the default) and
    --disable-overlap-schedule (sync)."""
    doc = json.loads(SGLANG_RESULTS.read_text())
    assert doc["sglang_version"].startswith("0.5.23 ")
    for mode, key in (("async", "main_overlap_default"), ("sync", "normal_disable_overlap_schedule")):
        table = doc[key]["table"]
        _medians_match(SGLANG_SCHEDULER_HOST[mode],
                       {int(b): table[b]["scheduler_sum"]["median_ms"] * 1e-3 for b in table})
    assert ENGINES["sglang"].scheduler_host == SGLANG_SCHEDULER_HOST and ENGINES["sglang"].async_scheduling


def test_the_curve_passes_through_its_medians_and_every_backend_prices_it_alike():
    """Between the measured counts the line between their medians; from none at no sequences to the first; past
    the last its last stretch's slope; a number, an array and a spreadsheet formula agree."""
    from perfmodel.cost.backend import XL, Expr
    from perfmodel.engines import host_curve

    knots = VLLM_SCHEDULER_HOST["sync"]
    for n, seconds in knots:
        assert host_curve(knots, n) == pytest.approx(seconds, rel=1e-12)
    (n1, t1), (n2, t2) = knots[2], knots[3]
    mid = (n1 + n2) / 2
    assert host_curve(knots, mid) == pytest.approx((t1 + t2) / 2)
    assert host_curve(knots, 0.5) == pytest.approx(knots[0][1] / 2)
    (na, ta), (nb, tb) = knots[-2], knots[-1]
    assert host_curve(knots, 4096) == pytest.approx(tb + (tb - ta) / (nb - na) * (4096 - nb))
    seqs = np.array([0.5, 8.0, 100.0, 3000.0])
    assert list(host_curve(knots, seqs)) == pytest.approx([host_curve(knots, float(x)) for x in seqs])
    text = str(host_curve(knots, Expr("B1"), XL))
    assert text.count("MIN(MAX(") == len(knots) - 1 and "B1" in text
    assert eval(text.replace("MIN(MAX(", "min(max(").replace("MAX(", "max(").replace("B1", "100.0")) == \
        pytest.approx(host_curve(knots, 100.0))


def test_each_attention_dp_rank_schedules_its_share():
    from perfmodel.scenario import Scenario

    one = scheduler_rules(Scenario(engine="sglang"), 2048)["scheduler_s"]
    four = scheduler_rules(Scenario(engine="sglang", tp=1, attention_dp=4), 2048)["scheduler_s"]
    assert four == pytest.approx(ENGINES["sglang"].scheduler_host_s(512, True)) and four < one


def test_sync_adds_async_takes_the_longer_and_none_changes_nothing():
    assert with_scheduler(10e-3, 4e-3, overlapped=False) == pytest.approx(14e-3)
    assert with_scheduler(10e-3, 4e-3, overlapped=True) == 10e-3
    assert with_scheduler(10e-3, 40e-3, overlapped=True) == 40e-3
    t = 0.1 + 0.2  # bit-identical where no engine cost applies
    assert with_scheduler(t, 0.0) is t
    arr = np.array([5e-3, 50e-3])  # a sweep's steps
    assert list(with_scheduler(arr, 20e-3, overlapped=True)) == [20e-3, 50e-3]


def test_host_work_is_never_negative_and_grows_with_sequences():
    eng = ENGINES["vllm"]
    steps = [eng.scheduler_host_s(n, False) for n in (1, 8, 64, 256, 1024, 2048, 4096)]
    assert steps[0] > 0 and all(b > a for a, b in zip(steps, steps[1:]))
    assert 25e-3 < eng.scheduler_host_s(2048, False) < 35e-3
    assert eng.scheduler_host_s(2048, True) > eng.scheduler_host_s(2048, False)  # async's update caches blocks too
    assert all(ENGINES[k].scheduler_host_s(2048, True) == 0.0 for k in ("trtllm", "torch", "hf"))


def test_release_default_scheduling():
    """vLLM schedules asynchronously by default from 0.14 (its wheels, read offline); unknown releases keep the
    preset's; other engines have no rule."""
    assert async_scheduling_for("vllm", "0.12.0") is False
    assert async_scheduling_for("vllm", "0.13.0") is False
    assert async_scheduling_for("vllm", "0.14.0") is True
    assert async_scheduling_for("vllm", "0.19.0") is True
    assert async_scheduling_for("vllm", "nightly-5b8c30d62b754b57") is None
    assert async_scheduling_for("sglang", "0.5.9") is None
    assert ENGINES["vllm"].async_scheduling is False  # the preset's release, 0.11


def test_projection_takes_the_host_work_as_the_scheduling_mode_says():
    """gpt-oss-20b on one H200 at 2,048 sequences: synchronous scheduling adds vLLM's host work to every decode step,
    asynchronous takes the longer of device and host; TensorRT-LLM has no measured figure and pays none."""
    from perfmodel import project

    kw = dict(batch=2048, isl=256, osl=256)
    sync = project("h200-sxm", "gpt-oss-20b", engine="vllm", async_scheduling=False, **kw)
    over = project("h200-sxm", "gpt-oss-20b", engine="vllm", async_scheduling=True, **kw)
    host = ENGINES["vllm"].scheduler_host_s(2048, False)
    for s, o in ((sync.decode, over.decode), (sync.prefill, over.prefill)):
        sums = s.account.sums()
        device = sums["busy"] + sums["gaps"]
        assert s.time_s == pytest.approx(device + ENGINES["vllm"].scheduler_host_s(s.batch, False))
        assert o.time_s == pytest.approx(max(device, ENGINES["vllm"].scheduler_host_s(o.batch, True)))
    assert sync.decode.account.scheduler_s == pytest.approx(host)
    assert sync.tpot_s > over.tpot_s
    assert any("host work a step" in a for a in sync.assumptions)
    trt = project("h200-sxm", "gpt-oss-20b", engine="trtllm", **kw)
    assert not any("host work a step" in a for a in trt.assumptions)
    sol = project("h200-sxm", "gpt-oss-20b", engine="vllm", async_scheduling=False, mode="sol", **kw)
    assert sol.decode.account.scheduler_s == 0.0 == sol.prefill.account.scheduler_s


def test_serving_steps_pay_it_per_step_sequences():
    """The serving simulator's step model joins the host work for the step's own sequences."""
    from perfmodel.resolve import setup
    from perfmodel.serve.steptime import StepModel

    s_sync = setup("h200-sxm", "gpt-oss-20b", {"engine": "vllm", "async_scheduling": False, "isl": 256, "osl": 256})
    s_none = setup("h200-sxm", "gpt-oss-20b", {"engine": "trtllm", "isl": 256, "osl": 256})
    kw = dict(max_tokens=8192, max_seqs=1024, max_context=1024)
    sm = StepModel(s_sync.model, s_sync.hardware, s_sync.scenario, s_sync.profile, **kw)
    plain = StepModel(s_sync.model, s_sync.hardware, s_sync.scenario.with_(engine="torch"), s_sync.profile, **kw)
    assert scheduler_rules(s_none.scenario, 512) == {}
    t_sync, _ = sm.step(512, 300.0, [])
    t_plain, _ = plain.step(512, 300.0, [])
    assert t_sync > t_plain  # the same ops; only the host work differs (torch has no measured figure)
