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
    asynchronous takes the longer of device and host; TensorRT-LLM has no measured figure and pays none. (No front
    end, --api-servers 0, so that the scheduler's rule shows alone.)"""
    from perfmodel import project

    kw = dict(batch=2048, isl=256, osl=256, api_servers=0)
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


# -- the front end: processes of their own, a step goes no faster than the slowest --------------------------------

def _with_frontend(monkeypatch, key: str, curves: dict, split=(), per_rank=False, length=None):
    """The engine ``key`` with front-end curves ``curves`` (a test's own figures, not the measured ones) and no
    growth with the streamed length unless ``length`` gives one."""
    import dataclasses

    import perfmodel.engines as engines

    eng = dataclasses.replace(engines.ENGINES[key], frontend_host=curves, frontend_split=tuple(split),
                              api_servers_per_dp_rank=per_rank, frontend_length=length or {})
    monkeypatch.setitem(engines.ENGINES, key, eng)
    return eng


def test_the_front_end_bounds_a_step_and_never_adds_to_it():
    assert with_scheduler(10e-3, 4e-3, overlapped=False, frontend=12e-3) == pytest.approx(14e-3)
    assert with_scheduler(10e-3, 4e-3, overlapped=False, frontend=20e-3) == 20e-3
    assert with_scheduler(10e-3, 4e-3, overlapped=True, frontend=5e-3) == 10e-3
    assert with_scheduler(10e-3, 0.0, frontend=30e-3) == 30e-3
    arr = np.array([5e-3, 50e-3])
    assert list(with_scheduler(arr, 20e-3, overlapped=True, frontend=30e-3)) == [30e-3, 50e-3]


def test_the_slowest_process_binds_and_api_servers_share_the_streams(monkeypatch):
    """Two processes: the split one (the HTTP server) takes seqs / servers, the other (a detokenizer) all of them;
    no server at all (an offline run) streams nothing."""
    curves = {"http_server": ((100, 10e-3), (1000, 100e-3)), "detokenizer": ((100, 4e-3), (1000, 40e-3))}
    eng = _with_frontend(monkeypatch, "sglang", curves, split=("http_server",))
    assert eng.frontend_host_s(1000, 1) == pytest.approx(100e-3)
    assert eng.frontend_host_s(1000, 4) == pytest.approx(40e-3)  # 250 streams a server (25 ms) < the detokenizer
    assert eng.frontend_host_s(1000, 0) == 0.0
    seqs = np.array([100.0, 1000.0])
    assert list(eng.frontend_host_s(seqs, 1)) == pytest.approx([10e-3, 100e-3])
    from perfmodel.cost.backend import XL, Expr
    text = str(eng.frontend_host_s(Expr("B1"), 1, XL))
    assert text.startswith("MAX(") and "B1" in text


def test_the_front_end_streams_every_rank_and_vllm_starts_a_server_per_rank(monkeypatch):
    """The scheduler's host work is a rank's share, the front end the instance's streams over its servers: vLLM
    starts one API server per data-parallel rank by default (0.19.0 cli/serve.py), SGLang one."""
    from perfmodel.scenario import Scenario

    curve = {"api_server": ((100, 10e-3), (2000, 200e-3))}
    _with_frontend(monkeypatch, "vllm", curve, split=("api_server",), per_rank=True)
    one = scheduler_rules(Scenario(engine="vllm"), 2000)
    four = scheduler_rules(Scenario(engine="vllm", tp=1, attention_dp=4), 2000)
    assert one["frontend_s"] == pytest.approx(200e-3) and four["frontend_s"] == pytest.approx(50e-3)
    forced = scheduler_rules(Scenario(engine="vllm", tp=1, attention_dp=4, api_servers=1), 2000)
    assert forced["frontend_s"] == pytest.approx(200e-3)
    assert scheduler_rules(Scenario(engine="vllm", api_servers=0), 2000)["frontend_s"] == 0.0


def test_a_projection_and_its_serving_steps_take_the_front_end(monkeypatch):
    """A front end slower than the device sets the decode step (project and the serving step model alike), and
    --api-servers 0 removes it."""
    from perfmodel import project

    _with_frontend(monkeypatch, "sglang", {"http_server": ((1, 1e-3), (2048, 2048e-3))}, split=("http_server",))
    kw = dict(batch=512, isl=256, osl=256, engine="sglang")
    slow = project("h200-sxm", "llama-3.1-8b", **kw)
    off = project("h200-sxm", "llama-3.1-8b", api_servers=0, **kw)
    assert slow.decode.time_s == pytest.approx(max(off.decode.time_s, 0.512))
    assert slow.decode.account.frontend_s == pytest.approx(0.512) and off.decode.account.frontend_s == 0.0
    assert any("front end" in a for a in slow.assumptions)
    assert any("front end: none" in a for a in off.assumptions)


def test_the_front_end_grows_with_the_tokens_streamed(monkeypatch):
    """A process with a length curve takes its per-token seconds times the tokens a stream has sent past the main
    sweep's; the projection's streams have sent half the output; a process without one does not grow."""
    from perfmodel.engines import FRONTEND_BASE_TOKENS
    from perfmodel.scenario import Scenario

    eng = _with_frontend(monkeypatch, "sglang", {"http_server": ((100, 10e-3), (1000, 100e-3))},
                         split=("http_server",), length={"http_server": ((100, 1e-6), (1000, 20e-6))})
    assert eng.frontend_host_s(1000, 1) == pytest.approx(100e-3)  # at the main sweep's length
    assert eng.frontend_host_s(1000, 1, streamed=FRONTEND_BASE_TOKENS + 1000) == pytest.approx(120e-3)
    assert eng.frontend_host_s(1000, 2, streamed=FRONTEND_BASE_TOKENS + 1000) == pytest.approx(
        50e-3 + (1e-6 + 19e-6 * 400 / 900) * 1000)  # 500 streams a server
    assert eng.frontend_host_s(1000, 1, streamed=10) == pytest.approx(100e-3)  # shorter: no less than measured
    short = scheduler_rules(Scenario(engine="sglang", osl=128), 1000)["frontend_s"]
    long = scheduler_rules(Scenario(engine="sglang", osl=4093), 1000)["frontend_s"]
    assert long == pytest.approx(short + 20e-6 * (4093 / 2 - FRONTEND_BASE_TOKENS) - 20e-6 * (64 - FRONTEND_BASE_TOKENS))
    _with_frontend(monkeypatch, "vllm", {"api_server": ((100, 10e-3), (1000, 100e-3))}, split=("api_server",))
    flat = scheduler_rules(Scenario(engine="vllm", osl=128), 1000)["frontend_s"]
    assert scheduler_rules(Scenario(engine="vllm", osl=4096), 1000)["frontend_s"] == flat  # no length curve: none


def test_the_front_end_length_curve_is_its_measurement():
    """SGLang's HTTP server: the per-token growth is the least-squares line through the committed runs after 1,000
    and 4,000 tokens (calibration/engine-host/sglang/frontend/results.json), and gives back each run's median within
    a few percent."""
    from perfmodel.engines import FRONTEND_BASE_TOKENS, SGLANG_FRONTEND_LENGTH, host_curve

    doc = json.loads((calibration_dir() / "engine-host" / "sglang" / "frontend" / "results.json").read_text())
    http = doc["processes"]["http_server"]
    base = dict(zip(doc["B"], http["cpu_median_s"]))
    runs = {int(h): {int(b): t for b, t in r["http_cpu_median_s"].items()}
            for h, r in http["output_length_dependence"].items() if h.isdigit()}
    knots = dict(SGLANG_FRONTEND_LENGTH["http_server"])
    assert sorted(knots) == sorted({b for r in runs.values() for b in r})
    for b, per_token in knots.items():
        fit = sum((r[b] - base[b]) * h for h, r in runs.items()) / sum(h * h for h in runs)
        assert per_token == pytest.approx(fit, rel=1e-4), b
    sglang = ENGINES["sglang"]
    for h, r in runs.items():
        for b, measured in r.items():
            modelled = host_curve(sglang.frontend_host["http_server"], b) + knots[b] * h
            assert modelled == pytest.approx(measured, rel=0.05), (h, b)
            assert sglang.frontend_host_s(b, 1, streamed=FRONTEND_BASE_TOKENS + h) == pytest.approx(modelled)


def test_vllms_length_curve_is_its_measurement_carried_as_a_share():
    """vLLM's API server: its growth a token (least squares over the same-process runs after 1,000 and 4,000 tokens,
    as a share of their baseline, measured on another VM) times the main sweep's curve at 256 and 1,024 streams."""
    from perfmodel.engines import VLLM_FRONTEND_HOST, VLLM_FRONTEND_LENGTH, host_curve

    doc = json.loads((calibration_dir() / "engine-host" / "vllm" / "frontend" / "results.json").read_text())
    runs = doc["processes"]["api_server"]["output_length_dependence"]
    lengths = [h for h in runs if h.isdigit()]
    knots = dict(VLLM_FRONTEND_LENGTH["api_server"])
    for b, per_token in knots.items():
        same = runs["baseline_same_session"]["api_cpu_median_s"][str(b)]
        ratios = [runs[h]["api_cpu_median_s"][str(b)] / same for h in lengths]
        assert ratios == pytest.approx([runs[h]["ratio_to_baseline"][str(b)] for h in lengths])
        share = sum((r - 1) * int(h) for r, h in zip(ratios, lengths)) / sum(int(h) ** 2 for h in lengths)
        assert per_token == pytest.approx(share * host_curve(VLLM_FRONTEND_HOST["api_server"], b), rel=1e-4), b
    assert ENGINES["vllm"].frontend_length == VLLM_FRONTEND_LENGTH


def test_api_servers_is_checked():
    from perfmodel.errors import InputError
    from perfmodel.scenario import Scenario

    for bad in (-1, 1.5, True, 5000):
        with pytest.raises(InputError, match="API server"):
            Scenario(api_servers=bad).validated()
    assert Scenario(api_servers=0).validated().api_servers == 0


def test_the_front_end_presets_are_their_measurements():
    """vLLM's API server and SGLang's HTTP server and detokenizer: each process's per-step CPU medians as the
    committed runs give them (calibration/engine-host/<engine>/frontend/results.json), none typed in by hand."""
    from perfmodel.engines import SGLANG_FRONTEND_HOST, VLLM_FRONTEND_HOST

    for key, curves, version in (("vllm", VLLM_FRONTEND_HOST, "0.19.0"), ("sglang", SGLANG_FRONTEND_HOST, "0.5.9")):
        doc = json.loads((calibration_dir() / "engine-host" / key / "frontend" / "results.json").read_text())
        assert doc["engine"] == key and doc["version"] == version
        assert sorted(curves) == sorted(doc["processes"])
        for name, knots in curves.items():
            _medians_match(knots, dict(zip(doc["B"], doc["processes"][name]["cpu_median_s"])))
        assert ENGINES[key].frontend_host == curves
        assert f"calibration/engine-host/{key}/frontend" in ENGINES[key].sources["frontend_host"]
    assert ENGINES["vllm"].api_servers_for(4) == 1 == ENGINES["sglang"].api_servers_for(4)  # 0.11's, 0.5.9's
    assert not ENGINES["trtllm"].frontend_host  # not measured: none


def test_the_documented_host_bound_steps():
    """docs/engines.md's gpt-oss-20b figures: vLLM's host work at 2,048 sequences, synchronous and asynchronous,
    without the front end."""
    from perfmodel import project

    text = " ".join((calibration_dir().parent / "docs" / "engines.md").read_text(encoding="utf-8").split())
    kw = dict(batch=2048, isl=256, osl=256, engine="vllm", api_servers=0)
    sync = project("h200-sxm", "gpt-oss-20b", async_scheduling=False, **kw).tpot_s * 1e3
    over = project("h200-sxm", "gpt-oss-20b", async_scheduling=True, **kw).tpot_s * 1e3
    assert f"decodes in {sync:.1f} ms a token with synchronous scheduling and {over:.1f} ms with asynchronous" in text


def test_a_faster_host_takes_the_host_work_faster():
    """--host-speed divides the scheduler's and the front end's measured work alike; out of range is refused."""
    from perfmodel.errors import InputError
    from perfmodel.scenario import Scenario

    base = scheduler_rules(Scenario(engine="sglang"), 512)
    fast = scheduler_rules(Scenario(engine="sglang", host_speed=2.0), 512)
    assert fast["scheduler_s"] == pytest.approx(base["scheduler_s"] / 2)
    assert fast["frontend_s"] == pytest.approx(base["frontend_s"] / 2) and base["frontend_s"] > 0
    for bad in (0.0, -1.0, 50.0, True, "2"):
        with pytest.raises(InputError, match="--host-speed"):
            Scenario(host_speed=bad).validated()


def test_the_documented_front_end_table_is_the_presets():
    """docs/engines.md's table of the front-end curves, and the disaggregated rows' arithmetic it quotes."""
    import re

    from perfmodel.engines import SGLANG_FRONTEND_HOST, VLLM_FRONTEND_HOST, host_curve

    doc = (calibration_dir().parent / "docs" / "engines.md").read_text(encoding="utf-8")
    table = doc.split("<!-- frontend-table -->")[1].split("<!-- /frontend-table -->")[0]
    rows = {r.split("|")[1].strip(): [float(x) for x in r.split("|")[2:-1]]
            for r in table.strip().splitlines()[2:]}
    for name, knots in (("vLLM 0.19.0 API server", VLLM_FRONTEND_HOST["api_server"]),
                        ("SGLang 0.5.9 HTTP server", SGLANG_FRONTEND_HOST["http_server"]),
                        ("SGLang 0.5.9 detokenizer", SGLANG_FRONTEND_HOST["detokenizer"])):
        assert rows[name] == [round(t * 1e3, 2) for _, t in knots], name
    text = " ".join(doc.split())
    events = 8192 / 22.66e-3  # docs/validation-silicon.md's measured 22.66 ms at 8,192 clients
    assert f"{round(events, -4):,.0f} events a second" in text
    assert f"would take {host_curve(SGLANG_FRONTEND_HOST['http_server'], 8192):.1f} s a step" in text
    assert re.search(r"22\.7 ms a token", text)


def test_the_documented_host_comparison_is_the_committed_runs():
    """docs/engines.md's "1.3-2.4 times slower": the lent GPU machine's host against the development VM, the
    smallest and largest ratio of the three kinds of work at three stream counts (medians of three repetitions)."""
    import statistics

    folder = calibration_dir() / "engine-host" / "host-speed"
    vm = json.loads((folder / "host_speed_devvm.json").read_text())["results"]
    node = json.loads((folder / "host_speed_gpu_node.json").read_text())["results"]
    ratios = []
    for work in ("stream", "pickle", "objects"):
        for b in (256, 512, 1024):
            med = [statistics.median(doc[f"{r}/{b}"][work]["cpu_median_s"] for r in range(3)) for doc in (vm, node)]
            ratios.append(med[1] / med[0])
    text = " ".join((calibration_dir().parent / "docs" / "engines.md").read_text(encoding="utf-8").split())
    assert f"{min(ratios):.1f}-{max(ratios):.1f} times slower than the Xeon VM" in text
    amd = json.loads((folder / "host_speed_devvm_amd.json").read_text())
    assert amd["cpu"] == "AMD EPYC"
    slower = [statistics.median(amd["results"][f"{r}/{b}"][work]["cpu_median_s"] for r in range(3))
              / statistics.median(vm[f"{r}/{b}"][work]["cpu_median_s"] for r in range(3))
              for work in ("stream", "pickle", "objects") for b in (256, 512, 1024)]
    assert f"ran the same work {min(slower):.1f}-{max(slower):.1f} times slower than the Xeon VM" in text


def test_the_serving_step_model_takes_the_front_end(monkeypatch):
    """perfmodel.serve's steps: a decode step of 512 sequences under a front end slower than the device takes the
    front end's time; with --api-servers 0 the device's."""
    from perfmodel.resolve import setup
    from perfmodel.serve.steptime import StepModel

    _with_frontend(monkeypatch, "sglang", {"http_server": ((1, 1e-3), (2048, 2048e-3))}, split=("http_server",))
    s = setup("h200-sxm", "llama-3.1-8b", {"engine": "sglang", "isl": 256, "osl": 256})
    kw = dict(max_tokens=8192, max_seqs=1024, max_context=1024)
    slow = StepModel(s.model, s.hardware, s.scenario, s.profile, **kw)
    off = StepModel(s.model, s.hardware, s.scenario.with_(api_servers=0), s.profile, **kw)
    t_slow, _ = slow.step(512, 300.0, [])
    t_off, _ = off.step(512, 300.0, [])
    assert t_off < 0.512 and t_slow == pytest.approx(0.512)


def test_the_serving_steps_front_end_grows_with_the_workloads_outputs(monkeypatch):
    """perfmodel.serve's steps take the tokens a stream has sent from the workload (half its mean output), not from
    the scenario's --osl; the simulation passes it."""
    from perfmodel.engines import FRONTEND_BASE_TOKENS
    from perfmodel.resolve import setup
    from perfmodel.serve.simulate import simulate
    from perfmodel.serve.steptime import StepModel
    from perfmodel.serve.workload import closed_loop_requests, parse_dist

    _with_frontend(monkeypatch, "sglang", {"http_server": ((1, 1e-3), (2048, 2048e-3))}, split=("http_server",),
                   length={"http_server": ((2048, 2048e-6),)})
    s = setup("h200-sxm", "llama-3.1-8b", {"engine": "sglang", "isl": 256, "osl": 256})
    kw = dict(max_tokens=8192, max_seqs=1024, max_context=4096)
    base = StepModel(s.model, s.hardware, s.scenario, s.profile, **kw)  # half of --osl 256: 128 tokens sent
    long = StepModel(s.model, s.hardware, s.scenario, s.profile, streamed=1000.0, **kw)
    assert base.step(512, 300.0, [])[0] == pytest.approx(0.512 + 512e-6 * (128 - FRONTEND_BASE_TOKENS))
    assert long.step(512, 300.0, [])[0] == pytest.approx(0.512 + 512e-6 * (1000 - FRONTEND_BASE_TOKENS))
    cache: dict = {}
    reqs = closed_loop_requests(64, 8, parse_dist("256", field="isl"), parse_dist("2000", field="osl"), seed=0)
    simulate(s.hardware, s.model, s.scenario, s.profile, reqs, cache=cache)
    assert [m.streamed for m in cache.values()] == [1000.0]


def test_a_draft_models_steps_pay_no_host_work_of_their_own(monkeypatch):
    """A separate draft model drafts inside the target's cycle: its steps and its prefill take their device time,
    so a front end that does not bind the verify step changes nothing (it had bound every draft step)."""
    from perfmodel import project

    _with_frontend(monkeypatch, "sglang", {"http_server": ((1, 1e-3), (2048, 60e-3))}, split=("http_server",))
    kw = dict(tp=8, batch=512, isl=1024, osl=1024, engine="sglang", mtp=3, mtp_accept=0.7, draft="llama-3.1-8b")
    streamed = project("h200-sxm", "llama-3.1-70b", **kw)
    offline = project("h200-sxm", "llama-3.1-70b", api_servers=0, **kw)
    assert streamed.decode.time_s > streamed.decode.account.frontend_s > 0.0  # the verify step is the longer
    assert streamed.tpot_s == pytest.approx(offline.tpot_s) and streamed.ttft_s == pytest.approx(offline.ttft_s)


def test_vllm_starts_a_server_per_rank_from_0_19():
    """vLLM 0.11.0's --api-server-count defaults to 1 (the preset's release); 0.19.0 defaults it to the
    data-parallel size (both read offline); releases between them are not read and keep the preset's."""
    from perfmodel.engines import api_servers_per_rank_for, release_defaults
    from perfmodel.scenario import Scenario
    from perfmodel.spec import load_spec

    assert api_servers_per_rank_for("vllm", "0.11.0") is False and api_servers_per_rank_for("vllm", "0.19.0")
    assert api_servers_per_rank_for("vllm", "0.15.1") is None and api_servers_per_rank_for("sglang", "0.5.9") is None
    assert release_defaults("vllm", "0.19.0", attention_dp=4)["api_servers"] == 4
    assert "api_servers" not in release_defaults("vllm", "0.17.0", attention_dp=4)
    hw = load_spec("b200")
    kw = dict(engine="vllm", tp=1, attention_dp=2, ep=2)
    assert Scenario(**kw).validated().for_hardware(hw).api_servers == 1
    assert Scenario(engine_release="0.19.0", **kw).validated().for_hardware(hw).api_servers == 2
    assert Scenario(engine_release="0.19.0", api_servers=3, **kw).validated().for_hardware(hw).api_servers == 3


def test_the_documented_length_growth_is_the_runs_and_the_preset():
    """docs/engines.md's long-output paragraph: the runs' medians, the preset's per-token slopes and the projection
    it quotes."""
    from perfmodel import project
    from perfmodel.engines import SGLANG_FRONTEND_LENGTH

    doc = (calibration_dir().parent / "docs" / "engines.md").read_text(encoding="utf-8")

    def marked(name):
        return " ".join(doc.split(f"<!-- {name} -->")[1].split(f"<!-- /{name} -->")[0].split())

    runs = json.loads((calibration_dir() / "engine-host" / "sglang" / "frontend" / "results.json").read_text())
    by_length = runs["processes"]["http_server"]["output_length_dependence"]
    ms = {(h, int(b)): t * 1e3 for h in ("1000", "4000") for b, t in by_length[h]["http_cpu_median_s"].items()}
    assert marked("length-runs") == (f"{ms['1000', 256]:.1f} and {ms['4000', 256]:.1f} ms, "
                                     f"{ms['1000', 1024]:.1f} and {ms['4000', 1024]:.1f} ms")
    slope = {b: s / b * 1e9 for b, s in SGLANG_FRONTEND_LENGTH["http_server"]}
    assert marked("length-slopes") == f"{slope[256]:.1f} ns a stream at 256 streams and {slope[1024]:.1f} ns at 1,024"
    vllm = json.loads((calibration_dir() / "engine-host" / "vllm" / "frontend" / "results.json").read_text())
    ratio = {(h, b): vllm["processes"]["api_server"]["output_length_dependence"][h]["ratio_to_baseline"][b]
             for h in ("1000", "4000") for b in ("256", "1024")}
    assert marked("vllm-length") == (
        f"{ratio['1000', '256']:.3f} and {ratio['4000', '256']:.3f} times its own baseline after 1,000 and 4,000 "
        f"tokens at 256 streams, {ratio['1000', '1024']:.3f} and {ratio['4000', '1024']:.3f} at 1,024")
    kw = dict(batch=512, isl=256, engine="sglang")
    short, long = (project("h200-sxm", "llama-3.1-8b", osl=o, **kw) for o in (128, 1024))
    assert marked("length-example") == (f"{short.tpot_s * 1e3:.1f} ms a token with 128 output tokens and "
                                        f"{long.tpot_s * 1e3:.1f} ms with 1,024")
    assert short.decode.time_s == short.decode.account.frontend_s and long.decode.time_s == long.decode.account.frontend_s
