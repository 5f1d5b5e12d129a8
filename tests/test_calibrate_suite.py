"""The calibration suite, end to end on the CPU (and on CUDA where there is one)."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from perfmodel.measure import run_suite  # noqa: E402
from perfmodel.measure.shapes import plan  # noqa: E402
from perfmodel.measure.store import Store, make_id, read_rows, repair, write_json_atomic  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
QUICK_FAMILIES = {"copy", "reduce", "gemm", "attention", "rmsnorm", "swiglu", "rotary", "residual",
                  "launch", "layer"}
ENV_KEYS = {"device_name", "sm_count", "sm_clock_mhz", "max_sm_clock_mhz", "mem_clock_mhz",
            "driver", "cuda", "torch", "triton", "hostname", "l2_bytes"}
ROW_KEYS = {"id", "kind", "params", "group", "time_s", "p10_s", "p90_s", "reps", "check", "error",
            "flops", "bytes", "impl", "env", "measured_at"}


def _env_for_subprocess() -> dict[str, str]:
    env = os.environ.copy()
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _assert_row_ok(r: dict) -> None:
    assert ROW_KEYS <= set(r), sorted(ROW_KEYS - set(r))
    assert ENV_KEYS <= set(r["env"]), sorted(ENV_KEYS - set(r["env"]))
    assert r["id"] == make_id(r["kind"], r["params"])
    assert isinstance(r["group"], str) and r["group"]
    if r["error"] is None:
        t = r["time_s"]
        assert isinstance(t, float) and math.isfinite(t) and t > 0, r
        assert r["p10_s"] <= t <= r["p90_s"] or math.isclose(r["p10_s"], r["p90_s"]), r
        assert r["reps"] >= 1
    else:
        assert r["time_s"] is None


def test_quick_suite_cpu_end_to_end(tmp_path):
    # every family but training, which tests/test_train_calibrate.py runs through the same suite
    families = set(plan("quick", "cpu")) - {"train", "collective"}
    n = run_suite("cpu", "quick", tmp_path, progress=False, only=families)
    rows = read_rows(tmp_path / "measurements.jsonl")
    assert n == len(rows) > 0
    kinds = {r["kind"] for r in rows}
    assert QUICK_FAMILIES <= kinds, QUICK_FAMILIES - kinds
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))
    expected = {c.id for k, cs in plan("quick", "cpu").items() if k in families for c in cs}
    assert set(ids) == expected
    for r in rows:
        _assert_row_ok(r)
        assert r["error"] is None, r
        if r["kind"] in ("gemm", "attention"):
            assert r["check"] == "ok", r
        if r["kind"] == "gemm":
            p = r["params"]
            assert r["flops"] == 2 * p["m"] * p["n"] * p["k"]
    env = json.loads((tmp_path / "environment.json").read_text())
    assert env["status"] == "done" and env["rows_written"] == n
    assert env["env"]["cpu_cores"] >= 1


def test_killed_run_resumes_without_loss_or_repeats(tmp_path):
    only = ["copy", "reduce", "rmsnorm", "swiglu", "residual", "rotary"]
    out = tmp_path / "run"
    path = out / "measurements.jsonl"
    cmd = [sys.executable, "-m", "perfmodel.measure.suite", "--device", "cpu", "--suite", "quick",
           "--out", str(out), "--only", ",".join(only), "--quiet"]
    proc = subprocess.Popen(cmd, cwd=str(REPO), env=_env_for_subprocess(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            if path.exists() and len(read_rows(path)) >= 3:
                break
            time.sleep(0.01)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    before = read_rows(path)
    assert len(before) >= 3
    # simulate a torn write: half a row, no newline
    with open(path, "ab") as fh:
        fh.write(b'{"id": "copy|bytes=999", "kind": "co')
    expected = {c.id for k, cs in plan("quick", "cpu").items() if k in only for c in cs}
    assert len(before) < len(expected), "the run finished before it could be killed"

    n = run_suite("cpu", "quick", out, resume=True, progress=False, only=set(only))
    rows = read_rows(path)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a row was repeated"
    assert set(ids) == expected, "rows lost or foreign rows kept"
    assert n == len(expected) - len(before)
    assert [r["id"] for r in rows[: len(before)]] == [r["id"] for r in before]
    # the file is clean JSON lines again
    for line in path.read_text().splitlines():
        json.loads(line)
    for r in rows:
        _assert_row_ok(r)
    # a second resume has nothing left to do
    assert run_suite("cpu", "quick", out, resume=True, progress=False, only=set(only)) == 0


def test_collectives_two_gloo_ranks(tmp_path):
    n = run_suite("cpu", "quick", tmp_path, nproc=2, progress=False, only={"collective"})
    rows = read_rows(tmp_path / "measurements.jsonl")
    assert n == len(rows) > 0
    assert {r["kind"] for r in rows} == {"collective", "overlap", "tp_layer"}
    coll = [r for r in rows if r["kind"] == "collective"]
    assert {r["params"]["op"] for r in coll} == {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"}
    for r in rows:
        assert r["params"]["world_size"] == 2 and r["params"]["backend"] == "gloo"
        _assert_row_ok(r)
        assert r["error"] is None, r
    sizes = sorted({r["params"]["bytes"] for r in coll})
    assert sizes[0] == 4096 and sizes[-1] == 4 * 1024 * 1024


def test_collective_skipped_without_nproc(tmp_path):
    assert run_suite("cpu", "quick", tmp_path, progress=False, only={"collective"}) == 0
    env = json.loads((tmp_path / "environment.json").read_text())
    assert any("collective skipped" in n for n in env["notes"])


def test_store_tolerates_torn_last_line(tmp_path):
    s = Store(tmp_path)
    for i in range(3):
        s.append({"id": f"x|i={i}", "kind": "x", "time_s": 1.0 + i, "nan": float("nan")})
    p = tmp_path / "measurements.jsonl"
    with open(p, "ab") as fh:
        fh.write(b'{"id": "x|i=3", "kind": "x", "ti')
    rows = read_rows(p)
    assert [r["id"] for r in rows] == ["x|i=0", "x|i=1", "x|i=2"]
    assert rows[0]["nan"] is None  # NaN written as null
    # a torn line that happens to parse is still not trusted
    with open(p, "ab") as fh:
        fh.write(b'"}')
    assert len(read_rows(p)) == 3
    cut = repair(p)
    assert cut > 0 and p.read_bytes().endswith(b"\n")
    s2 = Store(tmp_path, resume=True)
    assert s2.done == {"x|i=0", "x|i=1", "x|i=2"}
    s2.append({"id": "x|i=3", "kind": "x"})
    assert [r["id"] for r in read_rows(p)] == ["x|i=0", "x|i=1", "x|i=2", "x|i=3"]
    assert repair(p) == 0
    # garbage in the middle is skipped, the rest read
    with open(p, "ab") as fh:
        fh.write(b"not json\n")
        fh.write(json.dumps({"id": "x|i=4"}).encode() + b"\n")
    assert [r["id"] for r in read_rows(p)][-1] == "x|i=4"


def test_atomic_json_and_ids(tmp_path):
    p = tmp_path / "environment.json"
    write_json_atomic(p, {"a": 1})
    write_json_atomic(p, {"a": 2})
    assert json.loads(p.read_text()) == {"a": 2}
    assert not [x for x in tmp_path.iterdir() if x.name.endswith(".tmp")]
    assert make_id("gemm", {"m": 4096, "n": 8192, "k": 8192, "dtype": "bf16"}) == \
        "gemm|bf16|m=4096|n=8192|k=8192"
    assert make_id("copy", {"bytes": 1024}) == "copy|bytes=1024"
    assert make_id("attention", {"batch": 1, "causal": True, "dtype": "bf16"}) == \
        "attention|bf16|batch=1|causal=true"


def test_full_plan_shapes():
    fams = plan("full", "cuda")
    for fam, cases in fams.items():
        ids = [c.id for c in cases]
        assert len(ids) == len(set(ids)), fam
        assert all(c.group for c in cases)
    gemm = fams["gemm"]
    by = {}
    for c in gemm:
        by[c.params["dtype"]] = by.get(c.params["dtype"], 0) + 1
    assert 250 <= by["bf16"] <= 600
    assert 60 <= by["fp8"] <= 160 and 60 <= by["fp16"] <= 110
    assert 25 <= by["tf32"] <= 60 and 10 <= by["fp32"] <= 40
    for c in gemm:
        if c.params["dtype"] == "fp8":
            assert c.params["k"] % 16 == 0 and c.params["n"] % 16 == 0
    groups = {c.group for c in gemm}
    assert {"square", "awkward-n", "llama70b-tp4-qkv", "deepseek-expert-down"} <= groups
    for c in fams["attention"]:
        p = c.params
        assert 2 * p["batch"] * p["heads_kv"] * p["seq_kv"] * p["head_dim"] * 2 <= 40e9
    assert 25 <= len(fams["layer"]) <= 50
    assert len(fams["copy"]) == 16 and fams["copy"][-1].params["bytes"] == 4 << 30
    assert {c.params["mode"] for c in fams["launch"]} == {"eager", "graph", "queued", "driver", "round_trip"}
    assert {c.params["mode"] for c in plan("quick", "cpu")["launch"]} == {"eager"}


def test_package_import_is_light():
    code = ("import sys, perfmodel.measure, perfmodel.measure.shapes, perfmodel.measure.store;"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), env=_env_for_subprocess(),
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@gpu
@needs_cuda
def test_quick_suite_cuda(tmp_path):
    n = run_suite("cuda", "quick", tmp_path, progress=False)
    rows = read_rows(tmp_path / "measurements.jsonl")
    assert n == len(rows) > 0
    for r in rows:
        _assert_row_ok(r)
        assert r["error"] is None, r
        assert r["env"]["sm_count"] and r["env"]["device_name"]
        if r["kind"] in ("gemm", "attention"):
            assert r["check"] == "ok", r
    kinds = {r["kind"] for r in rows}
    assert QUICK_FAMILIES <= kinds
    modes = {r["params"]["mode"] for r in rows if r["kind"] == "launch"}
    assert modes == {"eager", "graph", "queued", "driver", "round_trip"}
    assert any(r["kind"] == "layer" and r["params"]["graph"] for r in rows)
    if torch.cuda.get_device_capability() >= (8, 9):
        assert any(r["kind"] == "gemm" and r["params"]["dtype"] == "fp8" for r in rows)


@gpu
@needs_cuda
def test_collectives_nccl(tmp_path):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    n = run_suite("cuda", "quick", tmp_path, nproc=2, progress=False, only={"collective"})
    rows = read_rows(tmp_path / "measurements.jsonl")
    assert n == len(rows) > 0
    assert {r["params"]["backend"] for r in rows} == {"nccl"}
    assert all(r["error"] is None for r in rows)


def test_sdpa_kernel_names_classify_to_their_backend():
    from perfmodel.measure.sdpa import classify_kernels

    # names as torch.profiler reports them on Hopper (cuDNN 9.19, torch 2.11)
    assert classify_kernels(["cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_3"]) == "cudnn"
    assert classify_kernels(["void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>"]) == "flash"
    assert classify_kernels(["void pytorch_flash::flash_fwd_splitkv_kernel<...>",
                             "void pytorch_flash::flash_fwd_splitkv_combine_kernel<...>"]) == "flash"
    assert classify_kernels(["fmha_cutlassF_bf16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel)"]) \
        == "efficient"
    assert classify_kernels(["ampere_bf16_s16816gemm_bf16_128x64", "softmax_warp_forward"]) == "math"
    assert classify_kernels([]) == "unknown"


def test_full_plan_measures_every_backend_and_the_default_dispatch():
    fams = plan("full", "cuda")
    backends = {c.params["backend"] for c in fams["attention"]}
    assert backends == {"default", "flash", "cudnn", "efficient"}
    shapes = {c.id.replace(f"backend={c.params['backend']}|", "") for c in fams["attention"]}
    defaults = [c for c in fams["attention"] if c.params["backend"] == "default"]
    assert len(defaults) == len(shapes)  # every shape has its plain-dispatch row
    assert all(c.params["backend"] == "default" for c in fams["instream"] if c.params["op"] == "attention")
    held = [c for c in fams["power"] if c.params["held_out"]]
    assert held and all(c.params["workload"] == "layer" for c in held)
