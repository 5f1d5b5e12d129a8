"""``perfmodel train``: the issue's JSON contract, table and CSV, --search, --report, --export, bad input."""
from __future__ import annotations

import csv
import io
import json

import pytest

from perfmodel.cli import main

BASE = ["train", "--arch", "h100-sxm", "--model", "llama-3.1-8b", "--gpus", "16", "--tp", "2", "--pp", "2",
        "--global-batch", "64", "--seq", "4096", "--calibration", "none"]


def run(args, capsys):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_has_the_fields_the_issue_lists(capsys):
    rc, out, _ = run(BASE + ["--format", "json", "--recompute", "selective", "--sequence-parallel"], capsys)
    assert rc == 0
    d = json.loads(out)
    for key in ("step_time_s", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu",
                "bubble_fraction", "exposed_comm_s", "memory", "ops"):
        assert key in d, key
    for key in ("step_time_s", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu",
                "bubble_fraction", "exposed_comm_s"):
        assert isinstance(d[key], float) and d[key] >= 0
    for key in ("weights", "gradients", "optimizer_states", "activations", "total"):
        assert d["memory"][key] > 0
    assert isinstance(d["memory"]["fits"], bool)
    passes = {o["pass"] for o in d["ops"]}
    assert {"forward", "backward", "recompute", "step"} <= passes
    roles = {o["role"] for o in d["ops"]}
    assert {"dgrad", "wgrad", "attn_bwd", "mem_bwd", "comm", "optimizer"} <= roles
    assert d["scenario"]["dp"] == 4 and d["scenario"]["micro_batches"] == 16
    assert 0 < d["mfu"] < 1 and d["hardware_tflops_per_gpu"] > d["model_tflops_per_gpu"]
    assert "Megatron" in d["definitions"]["model_tflops_per_gpu"]
    assert not any(isinstance(v, float) and v != v for v in d.values())


def test_dp_defaults_to_gpus_over_tp_pp_cp(capsys):
    rc, out, _ = run(BASE + ["--format", "json"], capsys)
    assert json.loads(out)["scenario"]["dp"] == 16 // (2 * 2)
    rc, out, _ = run(BASE + ["--format", "json", "--dp", "4"], capsys)
    assert rc == 0


def test_table_and_csv(capsys):
    rc, out, _ = run(BASE, capsys)
    assert rc == 0
    for word in ("step time", "tokens/s", "model TFLOP/s per GPU", "MFU", "pipeline bubble", "memory per GPU",
                 "assumptions"):
        assert word in out
    rc, out, _ = run(BASE + ["--format", "csv"], capsys)
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 1 and rows[0]["model"] == "llama-3.1-8b" and float(rows[0]["step_time_s"]) > 0


def test_every_schedule_and_option_runs(capsys):
    for extra in (["--schedule", "interleaved", "--interleave", "2"], ["--schedule", "zero-bubble"],
                  ["--schedule", "dualpipe"], ["--recompute", "full"], ["--zero", "3"], ["--zero", "0"],
                  ["--cp", "2", "--dp", "2"], ["--optimizer", "sgd"], ["--dtype", "fp8"], ["--mode", "sol"],
                  ["--attention", "unfused", "--dropout"], ["--kernels", "torch"], ["--no-dp-overlap"],
                  ["--tp-overlap", "0.5"]):
        rc, out, err = run(BASE + ["--format", "json"] + extra, capsys)
        assert rc == 0, (extra, err)
        assert json.loads(out)["step_time_s"] > 0


def test_moe_expert_parallel(capsys):
    rc, out, err = run(["train", "--arch", "h100-sxm", "--model", "mixtral-8x7b", "--gpus", "16", "--tp", "2",
                        "--ep", "4", "--global-batch", "64", "--seq", "4096", "--format", "json",
                        "--calibration", "none"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert any(o["name"] == "moe.dispatch" for o in d["ops"])


def test_search_lists_fitting_layouts_fastest_first(capsys):
    rc, out, err = run(["train", "--arch", "h100-sxm", "--model", "llama-3.1-8b", "--gpus", "8",
                        "--global-batch", "32", "--seq", "4096", "--search", "--format", "json", "--top", "5",
                        "--calibration", "none"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    times = [r["step_time_s"] for r in d["results"]]
    assert 1 <= len(times) <= 5 and times == sorted(times)
    assert all(r["memory"]["fits"] for r in d["results"])
    assert d["considered"] >= len(times)
    for r in d["results"]:
        s = r["scenario"]
        assert s["tp"] * s["pp"] * s["cp"] * s["dp"] == 8
    rc, out, _ = run(["train", "--arch", "h100-sxm", "--model", "llama-3.1-8b", "--gpus", "8", "--global-batch",
                      "32", "--seq", "4096", "--search", "--calibration", "none", "--top", "3"], capsys)
    assert rc == 0 and "fastest layouts" in out


def test_report_escapes_user_text(tmp_path, capsys):
    desc = tmp_path / "evil.yaml"
    desc.write_text("key: evil\nname: \"<script>alert(1)</script>\"\nfamily: llama\nhidden: 1024\nlayers: 4\n"
                    "heads: 8\nkv_heads: 8\nintermediate: 4096\nvocab: 32000\n")
    html = tmp_path / "r.html"
    rc, _, err = run(["train", "--arch", "h100-sxm", "--model", str(desc), "--gpus", "2", "--global-batch", "8",
                      "--seq", "1024", "--report", str(html), "--calibration", "none"], capsys)
    assert rc == 0, err
    text = html.read_text()
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;" in text
    assert "<svg" in text and "Where the step time goes" in text and "http" not in text.split("</head>")[0]


def test_export_xlsx_and_csv(tmp_path, capsys):
    openpyxl = pytest.importorskip("openpyxl")
    x = tmp_path / "w.xlsx"
    rc, _, err = run(BASE + ["--export", str(x)], capsys)
    assert rc == 0, err
    wb = openpyxl.load_workbook(x)
    assert {"Summary", "Breakdown", "Memory", "Ops", "Scenario", "Assumptions"} <= set(wb.sheetnames)
    mem = {r[0].value: r[1].value for r in wb["Memory"].iter_rows(min_row=2) if r[0].value}
    assert str(mem["total"]).startswith("=SUM(")
    c = tmp_path / "t.csv"
    rc, _, _ = run(BASE + ["--export", str(c)], capsys)
    assert rc == 0
    ops = list(csv.DictReader((tmp_path / "t-ops.csv").open()))
    assert ops and {"name", "pass", "time_s", "total_s"} <= set(ops[0])
    assert list(csv.DictReader(c.open()))[0]["arch"] == "h100-sxm"


@pytest.mark.parametrize("extra,field", [
    (["--gpus", "7"], "--gpus"),
    (["--schedule", "gpipe"], "--schedule"),
    (["--recompute", "some"], "--recompute"),
    (["--zero", "4"], "--zero"),
    (["--global-batch", "30"], "--global-batch"),
    (["--ep", "2"], "--ep"),
    (["--sequence-parallel", "--tp", "1", "--pp", "1"], "--sequence-parallel"),
    (["--schedule", "interleaved", "--pp", "1", "--tp", "2"], "--schedule"),
    (["--schedule", "dualpipe", "--pp", "3", "--gpus", "24", "--global-batch", "48"], "--pp"),
    (["--cp", "2", "--seq", "4094"], "--seq"),
    (["--tp", "3", "--gpus", "12", "--global-batch", "12"], "--tp"),
    (["--dtype", "int4"], "--dtype"),
    (["--optimizer", "lion"], "--optimizer"),
    (["--tp-overlap", "1.5"], "--tp-overlap"),
    (["--export", "x.txt"], "--export"),
    (["--micro-batch", "0"], "--micro-batch"),
    (["--interleave", "3"], "--interleave"),
    (["--attention-kernel", "nope"], "--attention-kernel"),
])
def test_bad_input_is_one_line_naming_the_field(extra, field, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = list(BASE)
    rc, out, err = run(args + extra, capsys)
    assert rc == 2, (extra, out, err)
    lines = [x for x in err.strip().splitlines() if x]
    assert len(lines) == 1 and lines[0].startswith("perfmodel: error:") and field in lines[0], err
    assert "Traceback" not in err


def test_unknown_model_and_arch_are_one_line(capsys):
    rc, _, err = run(["train", "--arch", "h100-sxm", "--model", "nope-7b", "--gpus", "8", "--global-batch", "8",
                      "--seq", "1024"], capsys)
    assert rc == 2 and "unknown model" in err
    rc, _, err = run(["train", "--arch", "nope", "--model", "llama-3.1-8b", "--gpus", "8", "--global-batch", "8",
                      "--seq", "1024"], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model, gpus, tp, want", [("llama8b", 8, 2, "none"), ("llama-3.1-70b", 64, 8, "full")])
def test_recompute_auto_takes_the_least_that_fits(model, gpus, tp, want, capsys):
    """--recompute auto: Llama-3.1-8B on 8 H100s at TP 2 fits without recompute; Llama-3.1-70B at TP 8 fits neither
    without nor with selective recompute (98.9 GB of 81.2 without) and takes full."""
    base = ["train", "--arch", "h100-sxm", "--model", model, "--gpus", str(gpus), "--tp", str(tp),
            "--global-batch", "256", "--seq", "4096", "--format", "json"]
    rc, out, _ = run(base + ["--recompute", "auto"], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert doc["scenario"]["recompute"] == want and doc["memory"]["fits"]
    assert any("--recompute auto" in a for a in doc["assumptions"])
    from perfmodel.train import project_train  # the Python API resolves it alike

    api = project_train("h100-sxm", model, gpus=gpus, tp=tp, global_batch=256, seq=4096, recompute="auto")
    assert api.scenario.recompute == want and api.step_time_s == pytest.approx(doc["step_time_s"], rel=1e-9)
    for lesser in ("none", "selective")[:("none", "selective", "full").index(want)]:
        rc, out, _ = run(base + ["--recompute", lesser], capsys)
        assert not json.loads(out)["memory"]["fits"]
