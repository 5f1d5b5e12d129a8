"""Collectives: the benchmark plan and worker (gloo ranks on CPU), the fit of alpha and bus bandwidth per
collective and world size, and the cost model using them."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from perfmodel.measure import collectives as C
from perfmodel.fit import collectives as F
from perfmodel.fit.collectives import fit_collectives
from perfmodel.fit.directory import fit_directory
from perfmodel.measure.shapes import COLLECTIVE_OPS, collective_sizes
from perfmodel.measure.store import make_id, read_rows
from perfmodel.cost.comm import bus_factor, collective_time, fitted_params
from perfmodel.errors import InputError
from perfmodel.profile import DEFAULTS, load_profile, save_profile
from perfmodel.spec import load_spec

KB, MB, GB = 1 << 10, 1 << 20, 1 << 30


# --- the plan (no torch) ------------------------------------------------------------------------------------

def test_full_plan_every_op_world_and_size_once():
    tasks = C.plan_tasks("full", "cuda", 8)
    ids = [make_id(k, p) for k, p in tasks]
    assert len(ids) == len(set(ids))
    coll = [p for k, p in tasks if k == "collective"]
    assert {p["op"] for p in coll} == set(COLLECTIVE_OPS) == {"all_reduce", "all_gather", "reduce_scatter",
                                                              "all_to_all", "p2p"}
    assert {p["world_size"] for p in coll} == set(range(2, 9))
    sizes = collective_sizes("full", "cuda")
    assert sizes[0] == 4 * KB and sizes[-1] == 4 * GB
    per_key = {}
    for p in coll:
        per_key.setdefault((p["op"], p["world_size"]), []).append(p["bytes"])
    assert all(len(v) == len(sizes) for v in per_key.values())
    # every rank's share is whole, at every world size
    assert all((p["bytes"] // 2) % p["world_size"] == 0 and p["backend"] == "nccl" for p in coll)
    # order: half the sizes first, then the overlap cases, then the other half (a budget cut keeps the range)
    kinds = [k for k, _ in tasks]
    first_overlap, last_overlap = kinds.index("overlap"), len(kinds) - 1 - kinds[::-1].index("overlap")
    before = {p["bytes"] for k, p in tasks[:first_overlap]}
    after = {p["bytes"] for k, p in tasks[last_overlap + 1:] if k == "collective"}
    assert 4 * KB in before and 4 * GB in before and not before & after
    ov = [p for k, p in tasks if k == "overlap"]
    assert {p["method"] for p in ov} == {"stream", "decomposed"}
    assert {p["world_size"] for p in ov} == {8, 2}
    for p in ov:
        if p["method"] == "decomposed":
            unit = p["chunks"] * (p["world_size"] if p["op"] == "reduce_scatter" else 1)
            assert p["m"] % unit == 0 and p["bytes"] == p["m"] * p["n"] * 2


def test_explicit_world_one_is_a_smoke_test_plan():
    tasks = C.plan_tasks("full", "cuda", 1, worlds=[1], max_bytes=64 * MB)
    kinds = {k for k, _ in tasks}
    assert kinds == {"collective", "overlap", "tp_layer"}
    assert all(p["world_size"] == 1 for _, p in tasks) and not any(p.get("op") == "p2p" for _, p in tasks)
    assert C.plan_tasks("full", "cuda", 1) == []  # by default a single rank has nothing to measure


def test_plan_estimate_fits_one_device_command():
    tasks = C.plan_tasks("full", "cuda", 8)
    est = sum(C.estimate_task_s(k, p, 0.05) for k, p in tasks)
    assert 30 < est < 450  # the device command's budget (docs/collectives.md)


def test_launcher_turns_nvlink_multicast_off(monkeypatch, tmp_path):
    seen = {}

    class Done:
        returncode = 0

    def fake_run(cmd, env, **kw):
        seen["cmd"], seen["env"] = cmd, env
        return Done()

    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # whatever the caller had
    monkeypatch.setattr(C.subprocess, "run", fake_run)
    rc, n, note = C.launch("cuda", "full", tmp_path, 8, time_budget_s=10)
    assert rc == 0 and n == 0 and note == ""
    assert seen["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert seen["env"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert seen["env"]["NVSHMEM_DISABLE_NVLS"] == "1"
    assert "--nproc_per_node" in seen["cmd"] and "8" in seen["cmd"]


# --- the worker on gloo ranks -------------------------------------------------------------------------------

def _ok(r):
    assert r["error"] is None, r
    assert r["time_s"] > 0 and r["p10_s"] <= r["time_s"] <= r["p90_s"] and r["reps"] >= 5
    assert r["params"]["backend"] == "gloo" and r["env"]["device_name"]


def test_gloo_every_collective_at_every_world_size(tmp_path):
    pytest.importorskip("torch")
    rc, n, note = C.launch("cpu", "quick", tmp_path, 4, time_budget_s=60,
                           extra_args=["--families", "collective", "--max-bytes", str(4 * KB), "--target-s", "0.002"])
    assert rc == 0, note
    rows = read_rows(tmp_path / "measurements.jsonl")
    assert n == len(rows) == 5 * 3  # ops x worlds 2..4 at 4 KB
    got = {(r["params"]["op"], r["params"]["world_size"]) for r in rows}
    assert got == {(op, w) for op in COLLECTIVE_OPS for w in (2, 3, 4)}
    for r in rows:
        _ok(r)
        p = r["params"]
        assert r["kind"] == "collective" and p["bytes"] % (4 * p["world_size"]) == 0
        assert r["bus_bytes"] == pytest.approx(C.bus_bytes(p["op"], p["bytes"], p["world_size"]))
    # resumable: what is there is not measured again (a pair of ranks plans only the world-2 cases)
    rc, n, _ = C.launch("cpu", "quick", tmp_path, 2, time_budget_s=60,
                        extra_args=["--families", "collective", "--max-bytes", str(4 * KB)])
    assert rc == 0 and n == 0


def test_gloo_overlap_and_tp_layer_rows(tmp_path):
    pytest.importorskip("torch")
    rc, n, note = C.launch("cpu", "quick", tmp_path, 2, time_budget_s=60,
                           extra_args=["--families", "overlap,tp_layer", "--target-s", "0.002"])
    assert rc == 0, note
    every = read_rows(tmp_path / "measurements.jsonl")
    assert n == len(every) and {r["kind"] for r in every} == {"overlap", "tp_layer"}
    layers = [r for r in every if r["kind"] == "tp_layer"]
    assert {r["params"]["phase"] for r in layers} == {"prefill", "decode"}
    for r in layers:
        _ok(r)
        assert r["params"]["tp"] == r["params"]["world_size"] == 2 and r["check"] == "skipped"
        assert r["flops"] > 0 and "2 all_reduce" in r["impl"]
    check = F.validate_tp_layers(layers, load_spec("h200"), DEFAULTS)  # CPU times against an H200: a path test
    assert {x["phase"] for x in check["rows"]} == {"prefill", "decode"} and check["prefill"]["n"] == 1
    rows = [r for r in every if r["kind"] == "overlap"]
    assert len(rows) >= 5
    methods = {r["params"]["method"] for r in rows}
    assert methods == {"stream", "decomposed"}
    for r in rows:
        _ok(r)
        assert r["gemm_s"] > 0 and r["comm_s"] > 0
        if r["params"]["method"] == "stream":
            assert r["time_s"] == pytest.approx(max(r["gemm_overlapped_s"], r["comm_overlapped_s"]), rel=0.5)
        else:
            assert r["gemm_chunks_s"] > 0 and r["comm_chunks_s"] > 0
    assert {r["params"]["chunks"] for r in rows if r["params"]["method"] == "decomposed"} == {1, 2}
    # the fit runs on what the worker wrote (the CPU's numbers mean nothing; the path is what is tested)
    from perfmodel.cost.overlap import check_params, fit_overlap

    fitted, report = fit_overlap(rows)
    assert report["stream_rows"] == 2 and report["decomposed_rows"] == 3
    assert set(fitted) == {"sm_share", "interference", "chunk_overhead_s"} and check_params(fitted) is None


# --- the fit ------------------------------------------------------------------------------------------------

TRUE = {("all_reduce", 2): (9e-6, 180e9), ("all_reduce", 8): (24e-6, 360e9), ("all_gather", 8): (14e-6, 340e9),
        ("p2p", 2): (6e-6, 390e9), ("all_to_all", 4): (12e-6, 300e9)}


def synthetic_rows(truth=TRUE, backend="nccl", noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for (op, w), (alpha, bw) in truth.items():
        for b in (4 * KB * 4 ** i for i in range(10)):
            bus = C.bus_bytes(op, b, w)
            t = (alpha + bus / bw) * float(np.exp(rng.normal(0.0, noise)))
            p = {"op": op, "bytes": b, "world_size": w, "backend": backend}
            rows.append({"id": make_id("collective", p), "kind": "collective", "params": p, "time_s": t,
                         "error": None, "bus_bytes": bus})
    return rows


def test_fit_recovers_alpha_and_bus_bandwidth_per_collective_and_world(tmp_path):
    hw = load_spec("h200")
    rows = synthetic_rows()
    rows.append({"id": "collective|bad", "kind": "collective", "params": {"op": "all_reduce", "bytes": 4096,
                 "world_size": 8, "backend": "nccl"}, "time_s": None, "error": "OutOfMemoryError"})
    rows += synthetic_rows({("all_reduce", 8): (1e-3, 1e9)}, backend="gloo")  # a CPU run beside: ignored
    prof, info = fit_collectives(DEFAULTS, rows, hw)
    assert info["backend"] == "nccl"
    assert set(prof.comm_alpha_s) == {f"{op}:{w}" for op, w in TRUE}
    for (op, w), (alpha, bw) in TRUE.items():
        key = f"{op}:{w}"
        assert prof.comm_alpha_s[key] == pytest.approx(alpha, rel=1e-6)
        assert prof.comm_eta[key] == pytest.approx(bw / hw.scaleup_bandwidth, rel=1e-6)
        assert info["fits"][key]["bus_bw_B_s"] == pytest.approx(bw, rel=1e-6)
        assert info["fits"][key]["median_abs_error"] < 1e-6
    # the profile round-trips through its file with the fitted fields checked
    path = tmp_path / "profile.json"
    save_profile(prof, path)
    back = load_profile(path)
    assert back.comm_alpha_s == prof.comm_alpha_s and back.comm_eta == prof.comm_eta


def test_fit_with_noise_reports_error_by_size_class():
    hw = load_spec("h200")
    prof, info = fit_collectives(DEFAULTS, synthetic_rows(noise=0.03, seed=3), hw)
    fit = info["fits"]["all_reduce:8"]
    assert prof.comm_alpha_s["all_reduce:8"] == pytest.approx(24e-6, rel=0.15)
    assert fit["bus_bw_B_s"] == pytest.approx(360e9, rel=0.15)
    assert set(fit["size_classes"]) == {"latency (<= 64 KiB)", "middle", "bandwidth (> 16 MiB)"}
    assert all(c["median_abs_error"] < 0.1 for c in fit["size_classes"].values())


def test_fit_needs_three_sizes_and_leaves_profile_alone_without_rows():
    hw = load_spec("h200")
    prof, info = fit_collectives(DEFAULTS, synthetic_rows()[:2], hw)
    assert prof is DEFAULTS and not prof.comm_alpha_s


def test_fit_directory_writes_collectives_into_the_profile(tmp_path):
    env = {"device_name": "NVIDIA H200", "sm_count": 132}
    rows = synthetic_rows()
    for b in (MB, 16 * MB, 256 * MB):  # a few kernel rows: fit_directory needs something to fit
        rows.append({"id": f"copy|bytes={b}", "kind": "copy", "params": {"bytes": b},
                     "time_s": 4e-6 + 2 * b / 4.2e12, "check": "ok", "error": None})
    with open(tmp_path / "measurements.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps({**r, "env": env}) + "\n")
    (tmp_path / "environment.json").write_text(json.dumps(env))
    fit_directory(tmp_path, holdout=0.0)
    prof = load_profile(tmp_path)
    assert prof.comm_alpha_s["all_reduce:8"] == pytest.approx(24e-6, rel=1e-4)
    assert prof.provenance["collectives"]["fits"]["p2p:2"]["rows"] == 10
    hw = load_spec("h200")
    t = collective_time("all_reduce", 64 * MB, 8, 8, hw, prof)
    assert t == pytest.approx(24e-6 + bus_factor("all_reduce", 8) * 64 * MB / 360e9, rel=1e-4)


# --- the cost model with fitted parameters ------------------------------------------------------------------

def _fitted():
    return DEFAULTS.with_(comm_alpha_s={"all_reduce:2": 10e-6, "all_reduce:4": 14e-6, "all_reduce:8": 22e-6,
                                        "p2p:2": 5e-6},
                          comm_eta={"all_reduce:2": 0.5, "all_reduce:4": 0.7, "all_reduce:8": 0.8, "p2p:2": 0.9})


def test_comm_uses_the_measured_world_size():
    hw = load_spec("h200")
    prof = _fitted()
    n = 32 * MB
    for p, a, e in ((2, 10e-6, 0.5), (4, 14e-6, 0.7), (8, 22e-6, 0.8)):
        want = a + bus_factor("all_reduce", p) * n / (e * hw.scaleup_bandwidth)
        assert collective_time("all_reduce", n, p, p, hw, prof) == pytest.approx(want)
    assert collective_time("p2p", n, 2, 2, hw, prof) == pytest.approx(5e-6 + n / (0.9 * hw.scaleup_bandwidth))
    # unmeasured collectives keep the documented defaults
    assert collective_time("all_gather", n, 8, 8, hw, prof) == pytest.approx(
        collective_time("all_gather", n, 8, 8, hw, DEFAULTS))


def test_comm_interpolates_and_extrapolates_world_sizes():
    prof = _fitted()
    hw = load_spec("h200")
    a6, e6 = fitted_params("all_reduce", 6, hw, prof)
    assert a6 == pytest.approx(18e-6) and e6 == pytest.approx(0.75)  # halfway between 4 and 8
    a3, _ = fitted_params("all_reduce", 3, hw, prof)
    assert 10e-6 < a3 < 14e-6
    # beyond the largest measured group (an NVL72 domain): the spec's hop latency per extra ring step
    gb = load_spec("gb200")
    a16, e16 = fitted_params("all_reduce", 16, gb, prof)
    assert a16 == pytest.approx(22e-6 + 2 * 8 * gb.scaleup_latency) and e16 == 0.8
    only8 = DEFAULTS.with_(comm_alpha_s={"all_reduce:8": 21e-6}, comm_eta={"all_reduce:8": 0.8})
    a2, _ = fitted_params("all_reduce", 2, hw, only8)
    assert a2 == pytest.approx(21e-6 / 7)  # below: scaled by the ring steps
    assert gb.scaleup_domain >= 16
    t = collective_time("all_reduce", 1e6, 16, 16, gb, prof)
    assert t == pytest.approx(a16 + bus_factor("all_reduce", 16) * 1e6 / (0.8 * gb.scaleup_bandwidth))


def test_direct_collectives_keep_the_nearest_measured_latency():
    # all-to-all and the engines' one-shot all-reduce reach every peer at once through the switch: no ring step
    # is added beyond the largest measured group (NVIDIA's tables: nearly flat from 2 to 16 GPUs)
    gb = load_spec("gb200")
    prof = DEFAULTS.with_(comm_alpha_s={"all_to_all:4": 11e-6, "engine_all_reduce:4": 5e-6, "all_gather:4": 9e-6},
                          comm_eta={"all_to_all:4": 0.6, "engine_all_reduce:4": 0.4, "all_gather:4": 0.7})
    for kind, alpha in (("all_to_all", 11e-6), ("engine_all_reduce", 5e-6)):
        assert fitted_params(kind, 32, gb, prof)[0] == alpha and fitted_params(kind, 2, gb, prof)[0] == alpha
    # a ring still pays the fabric's hop latency for every extra step
    assert fitted_params("all_gather", 32, gb, prof)[0] == pytest.approx(9e-6 + 28 * gb.scaleup_latency)


def test_groups_beyond_the_domain_use_the_domain_fit_inside():
    hw = load_spec("h200")
    prof = _fitted()
    n = 64 * MB
    t16 = collective_time("all_reduce", n, 16, 16, hw, prof)
    inner = collective_time("all_reduce", n, 8, 8, hw, prof)
    assert t16 > inner
    outer = t16 - inner
    assert outer == pytest.approx(2 * hw.scaleout_latency
                                  + bus_factor("all_reduce", 2) * n / 8 / (prof.scaleout_eta * hw.scaleout_bandwidth))


def test_spec_latency_is_the_default_hop_latency():
    hw = load_spec("h200")
    slow = dataclasses.replace(hw, scaleup_latency=hw.scaleup_latency + 5e-6)
    for kind, group, steps in (("all_reduce", 8, 14), ("all_gather", 4, 3), ("p2p", 2, 1)):
        d = collective_time(kind, 1e6, group, group, slow, DEFAULTS) - collective_time(kind, 1e6, group, group, hw,
                                                                                           DEFAULTS)
        assert d == pytest.approx(steps * 5e-6)
    # small all-reduce on 8 GPUs: the profile's fixed cost plus 14 ring steps at the spec's hop latency
    assert collective_time("all_reduce", 0.0, 8, 8, hw, DEFAULTS) == pytest.approx(
        DEFAULTS.comm_base_s + 14 * hw.scaleup_latency)
    # measured: the fitted alpha replaces both
    prof = _fitted()
    assert collective_time("all_reduce", 0.0, 8, 8, slow, prof) == pytest.approx(22e-6)
    # speed of light ignores every latency
    assert collective_time("all_reduce", 8e6, 8, 8, hw, prof, sol=True) == pytest.approx(
        bus_factor("all_reduce", 8) * 8e6 / hw.scaleup_bandwidth)


@pytest.mark.parametrize("field,value,expect", [
    ("comm_alpha_s", {"allreduce:8": 1e-5}, "all_reduce:8"),
    ("comm_alpha_s", {"all_reduce:1": 1e-5}, "world size >= 2"),
    ("comm_alpha_s", {"all_reduce:8": -1.0}, "positive"),
    ("comm_eta", {"p2p:2": 3.0}, "ratio to the datasheet rate or bandwidth in (0, 2]"),
    ("overlap", {"sm_share": 1.5}, "sm_share a number in"),
    ("overlap", {"sm_shares": 0.1}, "overlap parameters among"),
    ("overlap", [0.1], "an object of overlap parameters"),
])
def test_profile_rejects_bad_collective_fields(tmp_path, field, value, expect):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({field: value}))
    with pytest.raises(InputError) as e:
        load_profile(path)
    msg = str(e.value)
    assert field in msg and expect in msg and "\n" not in msg


def test_older_profiles_with_the_retired_step_latencies_still_load(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"scaleup_alpha_s": 1e-6, "scaleout_alpha_s": 8e-6, "scaleup_eta": 0.7}))
    prof = load_profile(path)
    assert prof.scaleup_eta == 0.7 and not hasattr(prof, "scaleup_alpha_s")


def test_tp_layer_prediction_adds_the_two_all_reduces():
    from perfmodel.fit.layers import predict_layer
    from perfmodel.measure.shapes import _layer

    hw = load_spec("h200")
    p = _layer("llama-3.1-70b", 8, "prefill", 1, 2048, 0, False)
    total, comm = F.predict_tp_layer(p, hw, DEFAULTS)
    assert total == pytest.approx(predict_layer(p, hw, DEFAULTS) + comm)
    # each all-reduce as the projection times it, plus the device's cost of launching its kernel eagerly
    assert comm == pytest.approx(2 * (collective_time("all_reduce", 2048 * 8192 * 2, 8, 8, hw, DEFAULTS)
                                      + DEFAULTS.launch_queued_s))
    fitted = DEFAULTS.with_(comm_alpha_s={"all_reduce:8": 30e-6}, comm_eta={"all_reduce:8": 0.5})
    assert F.predict_tp_layer(p, hw, fitted)[1] > comm  # the measured collective enters the prediction
    # planned at every power-of-two TP up to the ranks, never fitted
    plan = [q for k, q in C.plan_tasks("full", "cuda", 8) if k == "tp_layer"]
    assert {q["tp"] for q in plan} == {2, 4, 8} and {q["phase"] for q in plan} == {"prefill", "decode"}
    assert {q["graph"] for q in plan if q["phase"] == "decode"} == {False, True}
    assert [q["graph"] for q in plan][-1] is True  # graph captures last
