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


def _line(seqs, seconds) -> tuple[float, float]:
    a, b = np.linalg.lstsq(np.vstack([np.ones(len(seqs)), np.array(seqs, float)]).T, np.array(seconds), rcond=None)[0]
    return float(a), float(b)


def test_the_preset_is_the_fit_of_the_committed_measurement():
    """(a, b) of the vLLM preset: least squares of the engine core's per-step medians against the running
    sequences, per scheduling mode, as the committed results give them (no figure typed in by hand)."""
    doc = json.loads(RESULTS.read_text())
    assert doc["env"]["vllm"] == "0.34.0"
    for mode in ("sync", "async"):
        pooled = doc["pooled"][mode]
        seqs = sorted(int(b) for b in pooled)
        a, b = _line(seqs, [pooled[str(n)]["engine_core_sum"]["wall_median_s"] for n in seqs])
        want_a, want_b = VLLM_SCHEDULER_HOST[mode]
        assert abs(a - want_a) < 5e-7 and abs(b - want_b) < 5e-9, (mode, a, b)
    assert ENGINES["vllm"].scheduler_host == VLLM_SCHEDULER_HOST
    assert "calibration/engine-host/vllm" in ENGINES["vllm"].sources["scheduler_host"]


def test_the_sglang_preset_is_the_fit_of_its_measurement():
    """SGLang's scheduler thread: the line of its per-step medians, overlap scheduler (async, the default) and
    --disable-overlap-schedule (sync)."""
    doc = json.loads(SGLANG_RESULTS.read_text())
    assert doc["sglang_version"].startswith("0.5.23 ")
    for mode, key in (("async", "main_overlap_default"), ("sync", "normal_disable_overlap_schedule")):
        table = doc[key]["table"]
        seqs = sorted(int(b) for b in table)
        a, b = _line(seqs, [table[str(n)]["scheduler_sum"]["median_ms"] * 1e-3 for n in seqs])
        want_a, want_b = SGLANG_SCHEDULER_HOST[mode]
        assert abs(a - want_a) < 5e-7 and abs(b - want_b) < 5e-9, (mode, a, b)
    assert ENGINES["sglang"].scheduler_host == SGLANG_SCHEDULER_HOST and ENGINES["sglang"].async_scheduling


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
    assert eng.scheduler_host_s(1, False) == 0.0  # the fit's intercept is negative: clamped
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
