"""perfmodel.measure.hf_generate: the pure-python parts (configs, arithmetic, rows, plan, budget) run
without torch or transformers; the model-building path is skipped where transformers is not installed."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from perfmodel.measure import hf_generate as hg


def test_import_needs_neither_torch_nor_transformers():
    code = ("import sys, perfmodel.measure.hf_generate as m; "
            "print(int('torch' in sys.modules), int('transformers' in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "0"]


@pytest.mark.parametrize("name,layers,hidden,kvh,params_b", [
    ("llama-3.1-8b", 32, 4096, 8, 8.03), ("llama-3.2-1b", 16, 2048, 8, 1.24), ("qwen3-8b", 36, 4096, 8, 8.19),
])
def test_shipped_configs(name, layers, hidden, kvh, params_b):
    cfg = hg.load_config(name)
    facts = hg.config_facts(cfg)
    assert (facts["layers"], facts["hidden"], facts["kv_heads"]) == (layers, hidden, kvh)
    assert facts["params"] / 1e9 == pytest.approx(params_b, abs=0.01)  # the model cards' counts
    assert facts["kv_bytes_per_token"] == 2 * layers * kvh * facts["head_dim"] * 2


def test_build_config_dict_overrides_and_drops():
    base = hg.load_config("qwen3-8b")
    cfg = hg.build_config_dict(base, layers=2)
    assert cfg["num_hidden_layers"] == 2 and cfg["max_window_layers"] == 2
    assert cfg["use_cache"] is True
    for k in ("torch_dtype", "transformers_version", "architectures"):
        assert k not in cfg
    assert base["num_hidden_layers"] == 36  # not mutated
    tiny = hg.build_config_dict(hg.load_config("llama-3.2-1b"), layers=1, shrink=True)
    assert tiny["hidden_size"] == 64 and tiny["num_attention_heads"] * tiny["head_dim"] == 64
    assert tiny["rope_scaling"]["rope_type"] == "llama3"
    with pytest.raises(ValueError):
        hg.build_config_dict(base, layers=0)


def test_load_config_path_and_refusal(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    assert hg.load_config(p)["hidden_size"] == 8
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    with pytest.raises(ValueError):
        hg.load_config(bad)
    with pytest.raises(FileNotFoundError):
        hg.load_config("no-such-model", config_dir=tmp_path)


def test_tpot_arithmetic():
    assert hg.tpot_ms(0.050, 0.050 + 63 * 0.020, 64) == pytest.approx(20.0)
    assert hg.tpot_ms(0.05, 1.0, 1) is None
    assert hg.tpot_ms(None, 1.0, 64) is None
    ttft, tpot = hg.ttft_tpot([0.10, 0.30, 0.11], [1.10, 5.0, 1.12], 11)
    assert ttft == pytest.approx(110.0)  # medians, so one slow sample does not move them
    assert tpot == pytest.approx((1.12 - 0.11) / 10 * 1e3)
    assert hg.median([]) is None and hg.median([float("nan"), 2.0]) == 2.0


def test_busy_time_union():
    assert hg.busy_time_us([]) == 0
    assert hg.busy_time_us([(0, 10), (5, 15), (20, 25), (21, 22)]) == pytest.approx(20)
    assert hg.busy_time_us([(3, 3), (4, 2)]) == 0  # empty or reversed intervals count nothing


def test_top_level_ops():
    ops = [(1, 0, 10), (1, 1, 2), (1, 3, 4), (1, 10, 5), (2, 0, 100), (2, 50, 1)]
    assert hg.top_level_count(ops) == 3


def test_kernel_category_and_names():
    assert hg.kernel_category("nvjet_tst_128x64_64x4_1x1_v_bz_coopB_TNT") == "gemm"
    assert hg.kernel_category("void at::native::(anonymous namespace)::CatArrayBatchedCopy<...>") == "cat"
    assert hg.kernel_category("fmha_cutlassF_bf16_aligned_64x128_rf_sm80") == "attention"
    assert hg.kernel_category("void at::native::vectorized_elementwise_kernel<4, ...>") == "elementwise"
    assert hg.kernel_category("void at::native::reduce_kernel<512, 1, ...>") == "reduce"
    assert hg.kernel_category("gpu_memcpy") == "memcpy"
    assert hg.kernel_category("something_else") == "other"
    long = "x" * 500
    assert len(hg.short_kernel_name(long)) == 160 and hg.short_kernel_name(" a \n b ") == "a b"


def test_table_rows_written_atomically(tmp_path):
    t = hg.Table(tmp_path / "g.csv", hg.GENERATE_COLUMNS)
    t.add(model="m", cache="dynamic", batch=1, isl=128, osl=64, ttft_ms=12.3456789, tpot_ms=float("nan"),
          ttft_samples_ms=[1.0, 2.5], status="ok")
    rows = list(csv.DictReader(open(tmp_path / "g.csv", encoding="utf-8")))
    assert rows[0]["ttft_ms"] == "12.3457" and rows[0]["tpot_ms"] == "" and rows[0]["ttft_samples_ms"] == "1;2.5"
    assert list(rows[0]) == list(hg.GENERATE_COLUMNS)
    t.add(model="m2", status="error")
    assert len(list(csv.DictReader(open(tmp_path / "g.csv", encoding="utf-8")))) == 2
    assert [p.name for p in tmp_path.iterdir()] == ["g.csv"]  # no temp file left behind
    with pytest.raises(KeyError):
        t.add(nonsense=1)
    d = hg.JsonDoc(tmp_path / "s.json", {"errors": []})
    d.append("errors", {"x": float("inf")})
    assert json.loads((tmp_path / "s.json").read_text())["errors"] == [{"x": None}]


def test_budget_and_reps():
    now = [0.0]
    b = hg.Budget(100, clock=lambda: now[0], reserve_s=5)
    assert b.allows(90) and not b.allows(96)
    now[0] = 60
    assert b.left() == 40 and b.allows(35) and not b.allows(36)
    assert hg.reps_for(1.0) == 4 and hg.reps_for(3.0) == 2 and hg.reps_for(1.9) == 3 and hg.reps_for(20.0) == 2 and hg.reps_for(0) == 4


def test_plan_covers_the_brief():
    full = hg.plan()
    assert [m for m, _ in full["grid"]] == ["llama-3.1-8b", "llama-3.2-1b", "qwen3-8b"]
    pts = dict(full["grid"])["llama-3.1-8b"]
    assert {b for _, b, _ in pts} == {1, 8, 32} and {i for _, _, i in pts} == {128, 1024, 2048}
    assert {c for c, _, _ in pts} == {"dynamic", "static"}
    assert full["osl"] >= 64 and set(full["models"]) <= set(hg.MODELS)
    quick = hg.plan(quick=True)
    assert len(quick["grid"]) == 1 and quick["osl"] < full["osl"]
    assert hg.estimate_point_s(8.0, 32, 2048, 64) > hg.estimate_point_s(8.0, 1, 128, 64) > 0


def test_cpu_info_never_raises():
    info = hg.cpu_info()
    assert "machine" in info


def test_tiny_model_on_cpu(tmp_path):
    """The torch path end to end on CPU, on a tiny model of the Llama-3.2-1B structure."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    args = hg.parse_args(["--out", str(tmp_path), "--quick", "--device", "cpu", "--shrink", "--budget-s", "120",
                          "--no-compile"])
    assert hg.run(args) == 0
    rows = list(csv.DictReader(open(tmp_path / "generate.csv", encoding="utf-8")))
    assert {r["cache"] for r in rows if r["status"] == "ok"} == {"dynamic", "static"}
    assert all(float(r["tpot_ms"]) > 0 for r in rows if r["status"] == "ok")
