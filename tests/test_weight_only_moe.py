"""Weight-only MoE formats, sliding-window attention and the MoE routing floor, as the engines' tables time them
(issue 25: gpt-oss's MXFP4 experts, Kimi K2's INT4 ones, gpt-oss's and Gemma's windowed layers)."""
from __future__ import annotations

import numpy as np
import pytest

from perfmodel import ops as O
from perfmodel.cost import time_op
from perfmodel.cost.gemm import gemm_format
from perfmodel.cost.tables import op_class, row_class
from perfmodel.graph import moe_expert_ops
from perfmodel.imports import aiconfigurator as aic
from perfmodel.profile import DEFAULTS
from perfmodel.resolve import resolve_hardware


def _moe_cols(fmt: str, n: int = 3) -> dict[str, list]:
    return {"kernel_source": ["moe_torch_flow"] * n, "moe_dtype": [fmt] * n, "num_tokens": [1, 64, 4096][:n],
            "hidden_size": [2880] * n, "inter_size": [2880] * n, "topk": [4] * n, "num_experts": [128] * n,
            "moe_tp_size": [1] * n, "moe_ep_size": [1, 8, 128][:n], "distribution": ["balanced"] * n,
            "latency": [0.07, 0.1, 0.36][:n]}


@pytest.mark.parametrize("fmt, act, weights, cls", [("w4a16_mxfp4", "bf16", "fp4", "bf16_wfp4"),
                                                     ("w4a8_mxfp4_mxfp8", "fp8", "fp4", "fp8_wfp4"),
                                                     ("int4_wo", "bf16", "int4", "bf16_wint4")])
def test_a_weight_only_moe_table_is_a_class_of_its_own(fmt, act, weights, cls):
    conv = aic.convert_moe(_moe_cols(fmt))
    assert len(conv.rows) == 3 and not conv.skipped
    p = conv.rows[0]["params"]
    assert (p["dtype"], p["weights"]) == (act, weights) and "scaling" not in p
    key, _, dims = row_class(conv.rows[0])
    assert key == ("moe", cls, "balanced")
    # the projection's module of the same format lands in the same class
    assert gemm_format(act, None, weights) == cls
    full = aic.convert_moe(_moe_cols("bfloat16"))
    assert row_class(full.rows[0])[0] == ("moe", "bf16", "balanced")
    assert conv.rows[0]["id"] != full.rows[0]["id"]


def test_weight_only_experts_read_their_own_bytes_and_keep_the_products_format():
    full = moe_expert_ops(64, 2880, 2880, 4, 128, 1, "bf16", "bf16", "decode")
    narrow = moe_expert_ops(64, 2880, 2880, 4, 128, 1, "bf16", "bf16", "decode", weight_dtype="fp4")
    for a, b in zip(full, narrow):
        if a.kind == "gemm":
            assert b.flops == a.flops and b.bytes < 0.4 * a.bytes
            assert b.params["dtype"] == "bf16" and b.params["weights"] == "fp4"
            assert "weights" not in a.params


def test_the_routing_floor_is_paid_per_pair_of_the_whole_group_at_any_ep():
    """A profile's per-pair routing time (moe_pair_s, fitted where a format's rows span EP widths) adds
    tokens x top_k x its value to the module whatever the EP width; absent, nothing; another format's never."""
    hw = resolve_hardware("h200-sxm")
    prof = DEFAULTS.with_(moe_pair_s={"bf16": 2e-8})

    def module(p, ep, w="bf16", weights=None):
        return sum(float(time_op(op, hw, p).time) * op.count
                   for op in moe_expert_ops(16384, 2880, 2880, 4, 128, ep, w, "bf16", "standalone",
                                            weight_dtype=weights))

    for ep in (1, 8, 128):
        assert module(prof, ep) - module(DEFAULTS, ep) == pytest.approx(16384 * 4 * 2e-8, rel=1e-6)
    assert module(prof, 8, weights="fp4") == pytest.approx(module(DEFAULTS, 8, weights="fp4"))


def test_the_routing_floor_follows_bandwidth_when_carried():
    from perfmodel.transfer import _structure

    src, dst = resolve_hardware("h200-sxm"), resolve_hardware("b200")
    got = _structure(DEFAULTS.with_(moe_pair_s={"bf16": 1e-9}), src, dst)["moe_pair_s"]["bf16"]
    assert got == pytest.approx(1e-9 * src.hbm_bandwidth / dst.hbm_bandwidth)
    same = _structure(DEFAULTS.with_(moe_pair_s={"bf16": 1e-9}), src, src, what_if=True)["moe_pair_s"]["bf16"]
    assert same == pytest.approx(1e-9)


def _attn_cols(window: int) -> dict[str, list]:
    return {"kernel_source": ["torch_flow"] * 2, "batch_size": [8, 8], "isl": [1, 1], "num_heads": [64, 64],
            "num_key_value_heads": [8, 8], "head_dim": [64, 64], "window_size": [window, window],
            "beam_width": [1, 1], "attn_dtype": ["bfloat16"] * 2, "kv_cache_dtype": ["bfloat16"] * 2,
            "step": [1023, 4095], "latency": [0.01, 0.011]}


def test_sliding_window_rows_are_a_class_of_their_own_and_ops_find_it():
    conv = aic.convert_attention(_attn_cols(128), "trtllm", "decode")
    assert len(conv.rows) == 2 and conv.rows[0]["params"]["window"] == 128
    key = row_class(conv.rows[0])[0]
    assert key[-1] == ("window", 128)
    full = aic.convert_attention(_attn_cols(0), "trtllm", "decode")
    assert "window" not in full.rows[0]["params"] and row_class(full.rows[0])[0] == key[:-1]
    op = O.attention("a", 8, 64, 8, 1, 4096, 64, causal=False, phase="decode", window=128)
    op = O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "packed": True}, op.count)
    assert op_class(op, "trtllm")[1] == key


def test_windowed_rows_stay_out_of_the_fitted_subsample(tmp_path):
    """An import holds a table's sliding-window rows in the whole tables (tables.npz) and keeps them out of the
    subsample a profile is fitted to (the fixture's table with window rows added)."""
    import gzip
    import json
    import shutil
    from pathlib import Path

    pq = pytest.importorskip("pyarrow.parquet")
    from perfmodel.cost.table_store import FILE, decode

    fixture = Path(__file__).parent / "data" / "aiconfigurator" / "systems"
    shutil.copytree(fixture, tmp_path / "systems")
    table = next((tmp_path / "systems").rglob("generation_attention_perf.parquet"))
    t = pq.read_table(table)
    cols = t.to_pydict()
    n = len(cols["window_size"])
    windowed = {k: v + [128 if k == "window_size" else x for x in v] for k, v in cols.items()}
    assert len(windowed["window_size"]) == 2 * n
    import pyarrow as pa

    pq.write_table(pa.table(windowed, schema=t.schema), table)
    out = tmp_path / "out"
    prov = aic.import_system(aic.find_source(tmp_path / "systems"), "b200_sxm", "trtllm", out,
                             families=["attention"])
    assert prov["tables"]["generation_attention_perf"]["rows_tables_only"]["sliding-window attention"] > 0
    with gzip.open(out / "measurements.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    assert rows and not any(r["params"].get("window") for r in rows)
    classes, _ = decode(out / FILE)
    windows = [c for c in classes if c.key[-1] == ("window", 128)]
    assert windows and all(c.main for c in windows)
