"""Sweeps: grid size and values, equality with project() point by point, --vary parsing errors."""
from __future__ import annotations
from perfmodel.resolve import resolve_scenario

import csv
import io
import math

import numpy as np
import pytest

from perfmodel import capacity
from perfmodel.errors import InputError
from perfmodel.outputs.sweep import METRICS, Axis, parse_vary, run_sweep, sweep_csv, sweep_svg
from perfmodel.projection import project_resolved
from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile
from perfmodel.scenario import Scenario
from perfmodel.spec import spec_with


@pytest.fixture(scope="module")
def b200():
    hw = resolve_hardware("b200")
    return hw, resolve_model("llama70b"), resolve_profile(None, hw)


def test_parse_range_with_units_and_lists():
    a = parse_vary("hbm_bandwidth=4TB/s:12TB/s:9")
    assert a.field == "hbm_bandwidth" and len(a.values) == 9
    assert a.values[0] == pytest.approx(4e12) and a.values[-1] == pytest.approx(12e12)
    assert a.values[1] == pytest.approx(5e12)
    b = parse_vary("batch=1,8,64,max")
    assert b.values == [1, 8, 64, "max"]
    assert parse_vary("tensor_flops.fp8=4.5PFLOPS,9PFLOPS").values == [4.5e15, 9e15]
    assert parse_vary("sm_count=100:148:3").values == [100, 124, 148]
    assert parse_vary("dtype=bf16,fp8").values == ["bf16", "fp8"]
    assert parse_vary("hbm_bytes=141GB,192GB").values == [141e9, 192e9]


@pytest.mark.parametrize("text", [
    "hbm_bandwidth", "hbm_bandwith=4TB/s", "hbm_bandwidth=4TB/s:12TB/s", "hbm_bandwidth=4TB/s:12TB/s:x",
    "hbm_bandwidth=4TFLOPS:8TFLOPS:3", "batch=1,two", "batch=0", "sm_count=1.5", "hbm_bandwidth=",
    "overlap=1.5", "hbm_bandwidth=4TB/s:12TB/s:0", "batch=max:8:2", "hbm_bandwidth=-1TB/s",
])
def test_bad_vary_is_one_line_input_error(text):
    with pytest.raises(InputError) as e:
        parse_vary(text)
    msg = str(e.value)
    assert "\n" not in msg and "--vary" in msg


def test_bad_vary_on_the_cli_exits_2(capsys):
    from perfmodel.cli import main

    assert main(["sweep", "--arch", "b200", "--model", "llama70b", "--vary", "hbm_bandwidth=4TB/s:x:3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("perfmodel: error:") and "\n" not in err


def test_grid_size_values_and_points_equal_project(b200):
    hw, model, prof = b200
    sc = Scenario(isl=1024, osl=128).validated()
    axes = [parse_vary("hbm_bandwidth=4TB/s:12TB/s:9"), parse_vary("batch=1,8,64,max")]
    res = run_sweep(hw, model, sc, prof, axes)
    assert res.shape == (9, 4) and len(res) == 36
    rows = list(res.rows())
    assert len(rows) == 36
    assert res.columns == ["hbm_bandwidth", "batch_requested", *METRICS, "batch", "fits"]
    assert [r["hbm_bandwidth"] for r in rows[::4]] == pytest.approx(list(np.linspace(4e12, 12e12, 9)))
    assert [r["batch_requested"] for r in rows[:4]] == [1, 8, 64, "max"]
    # 'max' resolves per hardware point (HBM capacity is not swept, so it is the same here)
    assert rows[3]["batch"] == capacity.max_batch(model, resolve_scenario(sc, hw, None), hw)
    assert rows[3]["batch"] == project_resolved(hw, model, resolve_scenario(sc.with_(batch="max"), hw, None), prof).batch
    for i, j in ((0, 0), (4, 2), (8, 3), (2, 1)):
        bw = axes[0].values[i]
        b = axes[1].values[j]
        p = project_resolved(spec_with(hw, hbm_bandwidth=bw), model, resolve_scenario(sc.with_(batch=b), spec_with(hw, hbm_bandwidth=bw), None), prof)
        row = rows[i * 4 + j]
        assert row["batch"] == p.batch
        for m, v in (("ttft_ms", p.ttft_s * 1e3), ("tpot_ms", p.tpot_s * 1e3), ("e2e_ms", p.e2e_s * 1e3),
                     ("throughput_tok_s", p.throughput_tok_s),
                     ("throughput_tok_s_per_gpu", p.throughput_tok_s_per_gpu)):
            assert math.isclose(row[m], v, rel_tol=1e-9), (m, row[m], v)


def test_max_batch_follows_hbm_capacity_and_looped_fields(b200):
    hw, model, prof = b200
    sc = Scenario(tp=2, dtype="fp8").validated()
    axes = [parse_vary("hbm_bytes=141GB,180GB,288GB"), parse_vary("isl=512,2048"), Axis("batch", ["max"])]
    res = run_sweep(hw, model, sc, prof, axes)
    assert res.shape == (3, 2, 1)
    rows = list(res.rows())
    for row in rows:
        sc2 = sc.with_(isl=row["isl"], batch="max")
        hw2 = spec_with(hw, hbm_bytes=row["hbm_bytes"])
        p = project_resolved(hw2, model, resolve_scenario(sc2, hw2, None), prof)
        assert row["batch"] == p.batch
        assert math.isclose(row["tpot_ms"], p.tpot_s * 1e3, rel_tol=1e-9)
        assert math.isclose(row["throughput_tok_s_per_gpu"], p.throughput_tok_s_per_gpu, rel_tol=1e-9)
    assert rows[0]["batch"] < rows[2]["batch"]


def test_structural_and_tensor_fields(b200):
    hw, model, prof = b200
    sc = Scenario(batch=16, tp=2).validated()
    axes = [parse_vary("tensor_flops.bf16=1.5PFLOPS,2.25PFLOPS"), parse_vary("tp=2,4"), parse_vary("sm_count=132,148")]
    res = run_sweep(hw, model, sc, prof, axes)
    for row in res.rows():
        p = project_resolved(spec_with(hw, **{"tensor_flops.bf16": row["tensor_flops.bf16"], "sm_count": row["sm_count"]}),
                     model, resolve_scenario(sc.with_(tp=row["tp"]), spec_with(hw, **{"tensor_flops.bf16": row["tensor_flops.bf16"], "sm_count": row["sm_count"]}), None), prof)
        assert math.isclose(row["ttft_ms"], p.ttft_s * 1e3, rel_tol=1e-9)
        assert math.isclose(row["throughput_tok_s_per_gpu"], p.throughput_tok_s_per_gpu, rel_tol=1e-9)


def test_ten_thousand_point_grid(b200):
    """The grid the speed goal is about (timed in benchmarks/bench_outputs.py, not here)."""
    hw, model, prof = b200
    sc = Scenario().validated()
    axes = [parse_vary("hbm_bandwidth=2TB/s:16TB/s:100"), parse_vary("batch=1:64:100")]
    assert len(axes[1].values) == 64  # integer ranges are rounded and deduplicated
    assert axes[1].values == list(range(1, 65))
    axes[1] = Axis("batch", list(range(1, 101)))
    res = run_sweep(hw, model, sc, prof, axes)
    assert len(res) == 10_000
    assert np.isfinite(res.metrics["tpot_ms"]).all()
    # faster memory, same batch: never slower
    assert (np.diff(res.metrics["tpot_ms"], axis=0) <= 1e-12).all()


def test_csv_and_plot(b200, tmp_path):
    from perfmodel.cli import main

    out, plot = tmp_path / "s.csv", tmp_path / "s.svg"
    assert main(["sweep", "--arch", "b200", "--model", "llama70b", "--vary", "hbm_bandwidth=4TB/s:12TB/s:9",
                 "--vary", "batch=1,8,64,max", "--out", str(out), "--plot", str(plot)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 36
    assert {"hbm_bandwidth", "ttft_ms", "tpot_ms", "e2e_ms", "throughput_tok_s", "throughput_tok_s_per_gpu",
            "batch"} <= set(rows[0])
    svg = plot.read_text()
    assert svg.startswith("<svg") and svg.count('class="mark line"') == 4
    pytest.importorskip("openpyxl")
    assert main(["sweep", "--arch", "b200", "--model", "llama70b", "--vary", "batch=1,2",
                 "--out", str(tmp_path / "s.xlsx")]) == 0
    assert (tmp_path / "s.xlsx").stat().st_size > 1000


def test_sweep_svg_one_axis(b200):
    hw, model, prof = b200
    res = run_sweep(hw, model, Scenario().validated(), prof, [parse_vary("dtype=bf16,fp8")])
    svg = sweep_svg(res, "tpot_ms")
    assert "<svg" in svg and "bf16" in svg
    assert sweep_csv(res).splitlines()[0].startswith("dtype,")
