"""perfmodel.measure.hf_generate and its parts: the pure-python ones (hf_plan: configs, arithmetic, plan, budget;
hf_rows: the rows and their tables; hf_trace: profiler traces) run without torch or transformers; the torch path
(hf_model, hf_host) runs end to end on CPU on a tiny model, skipped where transformers is not installed."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from perfmodel.measure import environment as menv
from perfmodel.measure import hf_generate as hg
from perfmodel.measure import hf_plan as hp
from perfmodel.measure import hf_rows as hr
from perfmodel.measure import hf_trace as ht


def test_import_needs_neither_torch_nor_transformers():
    code = ("import sys, perfmodel.measure.hf_generate as m; "
            "print(int('torch' in sys.modules), int('transformers' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "0"]


@pytest.mark.parametrize("name,layers,hidden,kvh,params_b", [
    ("llama-3.1-8b", 32, 4096, 8, 8.03), ("llama-3.2-1b", 16, 2048, 8, 1.24), ("qwen3-8b", 36, 4096, 8, 8.19),
])
def test_shipped_configs(name, layers, hidden, kvh, params_b):
    cfg = hp.load_config(name)
    facts = hp.config_facts(cfg)
    assert (facts["layers"], facts["hidden"], facts["kv_heads"]) == (layers, hidden, kvh)
    assert facts["params"] / 1e9 == pytest.approx(params_b, abs=0.01)  # the model cards' counts
    assert facts["kv_bytes_per_token"] == 2 * layers * kvh * facts["head_dim"] * 2


def test_build_config_dict_overrides_and_drops():
    base = hp.load_config("qwen3-8b")
    cfg = hp.build_config_dict(base, layers=2)
    assert cfg["num_hidden_layers"] == 2 and cfg["max_window_layers"] == 2
    assert cfg["use_cache"] is True
    for k in ("torch_dtype", "transformers_version", "architectures"):
        assert k not in cfg
    assert base["num_hidden_layers"] == 36  # not mutated
    tiny = hp.build_config_dict(hp.load_config("llama-3.2-1b"), layers=1, shrink=True)
    assert tiny["hidden_size"] == 64 and tiny["num_attention_heads"] * tiny["head_dim"] == 64
    assert tiny["rope_scaling"]["rope_type"] == "llama3"
    with pytest.raises(ValueError):
        hp.build_config_dict(base, layers=0)


def test_load_config_path_and_refusal(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    assert hp.load_config(p)["hidden_size"] == 8
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    with pytest.raises(ValueError):
        hp.load_config(bad)
    with pytest.raises(FileNotFoundError):
        hp.load_config("no-such-model", config_dir=tmp_path)


def test_tpot_arithmetic():
    assert hp.tpot_ms(0.050, 0.050 + 63 * 0.020, 64) == pytest.approx(20.0)
    assert hp.tpot_ms(0.05, 1.0, 1) is None
    assert hp.tpot_ms(None, 1.0, 64) is None
    ttft, tpot = hp.ttft_tpot([0.10, 0.30, 0.11], [1.10, 5.0, 1.12], 11)
    assert ttft == pytest.approx(110.0)  # medians, so one slow sample does not move them
    assert tpot == pytest.approx((1.12 - 0.11) / 10 * 1e3)
    assert hp.median([]) is None and hp.median([float("nan"), 2.0]) == 2.0


def test_busy_time_union():
    assert ht.busy_time_us([]) == 0
    assert ht.busy_time_us([(0, 10), (5, 15), (20, 25), (21, 22)]) == pytest.approx(20)
    assert ht.busy_time_us([(3, 3), (4, 2)]) == 0  # empty or reversed intervals count nothing


def test_top_level_ops():
    ops = [(1, 0, 10), (1, 1, 2), (1, 3, 4), (1, 10, 5), (2, 0, 100), (2, 50, 1)]
    assert ht.top_level_count(ops) == 3


def test_kernel_category_and_names():
    assert ht.kernel_category("nvjet_tst_128x64_64x4_1x1_v_bz_coopB_TNT") == "gemm"
    assert ht.kernel_category("void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>") == "cat"
    assert ht.kernel_category("fmha_cutlassF_bf16_aligned_64x128_rf_sm80") == "attention"
    assert ht.kernel_category("void at::native::vectorized_elementwise_kernel<4, ...>") == "elementwise"
    assert ht.kernel_category("void at::native::reduce_kernel<512, 1, ...>") == "reduce"
    assert ht.kernel_category("gpu_memcpy") == "memcpy"
    assert ht.kernel_category("something_else") == "other"
    long = "x" * 500
    assert len(ht.short_kernel_name(long)) == 160 and ht.short_kernel_name(" a \n b ") == "a b"


def test_record_rows_durable_and_tables_in_the_old_format(tmp_path):
    rec = hr.Record(tmp_path, {"osl": 64})
    assert not (tmp_path / "generate.csv").exists()  # a table only once it has a row
    rec.add("generate", model="m", cache="dynamic", batch=1, isl=128, osl=64, ttft_ms=12.3456789,
            tpot_ms=float("nan"), ttft_samples_ms=[1.0, 2.5], status="ok")
    rows = list(csv.DictReader(open(tmp_path / "generate.csv", encoding="utf-8")))
    assert rows[0]["ttft_ms"] == "12.3457" and rows[0]["tpot_ms"] == "" and rows[0]["ttft_samples_ms"] == "1;2.5"
    assert list(rows[0]) == list(hr.GENERATE_COLUMNS)
    rec.add("generate", model="m2", status="error")
    assert len(list(csv.DictReader(open(tmp_path / "generate.csv", encoding="utf-8")))) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["generate.csv", "measurements.jsonl", "summary.json"]
    with pytest.raises(KeyError):
        rec.add("generate", nonsense=1)
    rec.note("error", where="w", error=float("inf"), traceback="")
    rec.note("part", key="host", value={"a": 1})
    assert json.loads((tmp_path / "summary.json").read_text())["errors"] == [{"where": "w", "error": None,
                                                                             "traceback": ""}]
    # every row is in the store, one JSON object a line, before add() returns
    stored = [json.loads(line) for line in (tmp_path / "measurements.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in stored] == ["hf_generate", "hf_generate", "hf_error", "hf_part"]
    assert stored[0]["id"] == hr.generate_id("m", "dynamic", 1, 128, 64)


def test_record_resume_cuts_a_torn_row_and_keeps_the_rest(tmp_path):
    rec = hr.Record(tmp_path, {})
    rec.add("generate", model="m", cache="static", batch=8, isl=1024, osl=64, ttft_ms=5.0, status="ok")
    rec.note("part", key="host", value={})
    with open(tmp_path / "measurements.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"id": "hf_generate|model=m|cache=dynamic|batch=1|isl=128|osl=64", "kind": "hf_gen')  # killed
    again = hr.Record(tmp_path, {}, resume=True)
    assert again.store.torn_bytes > 0
    assert again.has(hr.generate_id("m", "static", 8, 1024, 64)) and again.has_part("host")
    assert not again.has(hr.generate_id("m", "dynamic", 1, 128, 64))  # the torn row is measured again
    assert [r["isl"] for r in again.table("generate")] == [1024]
    assert list(csv.DictReader(open(tmp_path / "generate.csv", encoding="utf-8")))[0]["isl"] == "1024"


def test_trace_condensed():
    events = [{"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "ts": 0, "dur": 10},
              {"ph": "X", "cat": "kernel", "name": "nvjet_gemm", "ts": 5, "dur": 10},
              {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH", "ts": 30, "dur": 2},
              {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "tid": 1, "ts": 0, "dur": 4},
              {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "tid": 1, "ts": 1, "dur": 1},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 1},
              {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": 2, "dur": 1},
              {"ph": "i", "cat": "kernel", "name": "ignored"}]
    dev, host = ht.condense(events, 1e-3)
    assert len(dev) == 3 and (host["cpu_op"], host["cpu_op_top"], host["launch"], host["sync_api"]) == (2, 1, 1, 1)
    s = ht.summarise(dev)
    assert (s["kernels"], s["memcpy"], s["busy_us"], s["by_name"]["nvjet_gemm"]) == (2, 1, 17.0, [2, 20.0])
    one = ht.summarise(dev[:1])
    assert ht.diff_rows(one, s, 1) == {"nvjet_gemm": (1, 10.0), "gpu_memcpy": (1, 2.0)}
    assert ht.categories({"nvjet_gemm": (2, 1.0), "gpu_memcpy": (1, 0.0)}) == {"gemm": 2, "memcpy": 1}


def test_budget_and_reps():
    now = [0.0]
    b = hp.Budget(100, clock=lambda: now[0], reserve_s=5)
    assert b.allows(90) and not b.allows(96)
    now[0] = 60
    assert b.left() == 40 and b.allows(35) and not b.allows(36)
    assert hp.reps_for(1.0) == 4 and hp.reps_for(3.0) == 2 and hp.reps_for(1.9) == 3 and hp.reps_for(20.0) == 2 and hp.reps_for(0) == 4


def test_plan_covers_the_brief():
    full = hp.plan()
    assert [m for m, _ in full["grid"]] == ["llama-3.1-8b", "llama-3.2-1b", "qwen3-8b"]
    pts = dict(full["grid"])["llama-3.1-8b"]
    assert {b for _, b, _ in pts} == {1, 8, 32} and {i for _, _, i in pts} == {128, 1024, 2048}
    assert {c for c, _, _ in pts} == {"dynamic", "static"}
    assert full["osl"] >= 64 and set(full["models"]) <= set(hp.MODELS)
    quick = hp.plan(quick=True)
    assert len(quick["grid"]) == 1 and quick["osl"] < full["osl"]
    assert hp.estimate_point_s(8.0, 32, 2048, 64) > hp.estimate_point_s(8.0, 1, 128, 64) > 0


def test_cpu_info_never_raises():
    info = menv.cpu_info()
    assert "machine" in info


def test_tiny_model_on_cpu(tmp_path):
    """The torch path end to end on CPU, on a tiny model of the Llama-3.2-1B structure; then --resume measures
    nothing twice, and a fresh run sets the old rows aside instead of appending to them."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    argv = ["--out", str(tmp_path), "--quick", "--device", "cpu", "--shrink", "--budget-s", "120", "--no-compile"]
    assert hg.run(hg.parse_args(argv)) == 0
    rows = list(csv.DictReader(open(tmp_path / "generate.csv", encoding="utf-8")))
    assert {r["cache"] for r in rows if r["status"] == "ok"} == {"dynamic", "static"}
    assert all(float(r["tpot_ms"]) > 0 for r in rows if r["status"] == "ok")
    host = list(csv.DictReader(open(tmp_path / "host.csv", encoding="utf-8")))
    assert {"add_inplace", "module_call", "dynamic_cat", "decode_forward_nosync"} <= {r["name"] for r in host}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert {"host", "cache_update", "decompose|llama-3.2-1b", "layers|llama-3.2-1b"} <= set(summary["parts"])
    env = json.loads((tmp_path / "environment.json").read_text())
    assert env["status"] == "done" and env["device"] == "cpu" and "model" in env["cpu"] and env["transformers"]
    stored = (tmp_path / "measurements.jsonl").read_text().splitlines()
    assert len(stored) == len([json.loads(x) for x in stored])

    assert hg.run(hg.parse_args(argv + ["--resume"])) == 0
    assert (tmp_path / "measurements.jsonl").read_text().splitlines() == stored  # nothing measured twice
    assert list(csv.DictReader(open(tmp_path / "generate.csv", encoding="utf-8"))) == rows

    assert hg.run(hg.parse_args(argv + ["--request-only", "--models", "none-of-them"])) == 0
    assert list(tmp_path.glob("measurements.jsonl.*.bak"))  # the first run's rows, set aside
