"""Training rows of the validation table: the scenario each describes, and its predicted value."""
from __future__ import annotations

import math

import pytest

from perfmodel.resolve import resolve_model
from perfmodel.train.validate import (metric_value, predict_row, preset_for, run_training_validation,
                                      scenario_for, training_value)

MEGATRON = {"id": "megatron-145b-1536", "kind": "training", "model": "gpt-145.6b", "hardware": "a100-sxm-80gb",
            "gpus": "1536", "tp": "8", "pp": "8", "precision": "bf16", "isl": "2048", "osl": "", "batch": "2304",
            "metric": "model_tflops_per_gpu", "value": "148", "unit": "TFLOP/s/GPU",
            "source": "Narayanan et al. 2021 (arXiv 2104.04473) Table 1", "notes": ""}
HEADER = ("id,kind,model,hardware,gpus,tp,pp,precision,isl,osl,batch,metric,value,unit,source,notes\n")


def test_megatron_rows_use_the_2021_software():
    model = resolve_model("gpt-145.6b")
    ts = scenario_for(MEGATRON, model)
    assert preset_for(MEGATRON) == "megatron-2021"
    assert (ts.attention, ts.recompute, ts.dropout, ts.dp_overlap, ts.zero) == ("unfused", "full", True, False, 0)
    assert (ts.gpus, ts.tp, ts.pp, ts.data_parallel, ts.global_batch, ts.seq) == (1536, 8, 8, 24, 2304, 2048)


def test_narayanan_tflops_count_the_recomputed_forward():
    proj, _ = predict_row(MEGATRON, calibration="none")
    assert metric_value(proj, "model_tflops_per_gpu", MEGATRON) == proj.hardware_tflops_per_gpu
    other = dict(MEGATRON, source="somewhere else")
    assert metric_value(proj, "model_tflops_per_gpu", other) == proj.model_tflops_per_gpu
    value, label = training_value(MEGATRON, calibration="none")
    assert math.isfinite(value) and 50 < value < 312 and label.startswith("none")


def test_validation_table_rows(tmp_path):
    p = tmp_path / "v.csv"
    p.write_text(HEADER + "a,training,llama-3.1-8b,h100-sxm,64,2,2,bf16,4096,,256,step_time_s,1.0,s,mine,\n"
                 "b,training,llama-3.1-8b,h100-sxm,64,2,2,bf16,4096,,256,tokens_per_s,1.0,tok/s,mine,\n"
                 "c,training,llama-3.1-8b,h100-sxm,64,2,2,bf16,4096,,256,bogus,1.0,x,mine,\n"
                 "d,inference,llama-3.1-8b,h100-sxm,1,1,1,bf16,128,128,1,ttft,1.0,ms,x,\n")
    rows = run_training_validation([p], calibration="none")
    assert [r["id"] for r in rows] == ["a", "b", "c"]
    a, b, c = rows
    assert a["predicted"] > 0 and a["error"] == pytest.approx(a["predicted"] - 1.0)
    assert b["predicted"] == pytest.approx(256 * 4096 / a["predicted"], rel=1e-9)
    assert c["predicted"] is None and "bogus" in c["status"]


def test_llama3_row_fits_in_memory():
    row = {"id": "llama3", "kind": "training", "model": "llama-3.1-405b", "hardware": "h100-sxm", "gpus": "16384",
           "tp": "8", "pp": "16", "precision": "bf16", "isl": "8192", "osl": "", "batch": "2048",
           "metric": "model_tflops_per_gpu", "value": "400", "source": "Llama 3 paper (arXiv 2407.21783) Table 4"}
    proj, ts = predict_row(row, calibration="none")
    assert preset_for(row) == "llama3" and ts.sequence_parallel and ts.zero == 1
    assert proj.memory.fits and ts.micro_batches == 16
    assert 100 < proj.model_tflops_per_gpu < 989
