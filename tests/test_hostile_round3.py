"""Hardening, third round (issue 27): each case of the issue, fed to the CLI as a user would, must give one line
on stderr naming the flag or field, exit code 2, no traceback and nothing written. The CLI runs in this process
(the ``cli`` fixture, tests/conftest.py: exit code, stdout, stderr and warnings as a process gives them); the cases
of ``train``, ``backtest`` and ``import`` start a real process each."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel.paths import repo_root

CONFIGS = repo_root() / "tests" / "data" / "hf_configs"


def _process(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "perfmodel", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def _one_line(done: subprocess.CompletedProcess, field: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-400:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-400:]
    assert field in lines[0], lines[0]


CLI_CASES = [
    (["project", "--arch", "h200", "--model", "llama8b", "--out", "-"], "--out"),
    (["sweep", "--arch", "h200", "--model", "llama8b", "--vary", "hbm_bandwidth=4TB/s,5TB/s", "--out", "x.parquet"],
     "--out"),
    (["sweep", "--arch", "h200", "--model", "llama8b", "--vary", "hbm_bandwidth=4TB/s,5TB/s", "--out", "s.svg",
      "--plot", "s.svg"], "--plot"),
    (["project", "--arch", "./b200.yaml", "--model", "llama8b"], "./b200.yaml"),
    (["project", "--arch", "h200", "--model", "llama8b", "--mem-fraction", "1e-9"], "--mem-fraction"),
    (["project", "--arch", "h200", "--model", "llama8b", "--gpu-hour-usd", "1e308"], "--gpu-hour-usd"),
    (["serve", "--arch", "h200", "--model", "llama8b", "--disagg", "99999999999p1d", "--rate", "1", "--requests", "10"],
     "--disagg"),
    (["train", "--arch", "h100-sxm", "--model", "llama8b", "--gpus", "8", "--global-batch", "8", "--seq", "10000000"],
     "--seq"),
    (["train", "--arch", "a100-sxm-80gb", "--model", "llama8b", "--gpus", "8", "--global-batch", "8", "--seq", "4096",
      "--dtype", "fp8"], "--dtype"),
    (["train", "--arch", "h100-sxm", "--model", "llama8b", "--gpus", "8", "--global-batch", "8", "--seq", "4096",
      "--dtype", "fp8", "--fp8-recipe", "mxfp8"], "--fp8-recipe"),
    (["tune", "attention", "--arch", "h200", "--heads", "32", "--seq-q", "100000000"], "--seq-q"),
    (["tune", "gemm", "--arch", "h200", "--m", "1", "--n", "4096", "--k", "1000000000000000000"], "--k"),
]


@pytest.mark.parametrize("args,field", CLI_CASES, ids=[" ".join(a[:1] + a[-2:]) for a, _ in CLI_CASES])
def test_flags_out_of_range_are_one_line(tmp_path, cli, args, field):
    _one_line(cli(args, tmp_path), field)
    assert not any(tmp_path.iterdir()), "nothing is written before every check passes"


def _mutated(tmp_path: Path, src: str, **changes) -> Path:
    d = json.loads((CONFIGS / src).read_text())
    d.update(changes)
    out = tmp_path / "config.json"
    out.write_text(json.dumps(d))
    return out


CONFIG_CASES = [
    ("moonshotai--Kimi-K2-Instruct_config.json", {"n_routed_experts": 0}, "n_routed_experts"),
    ("openai--gpt-oss-120b_config.json", {"quantization_config": "junk"}, "quantization_config"),
    ("Qwen--Qwen3-8B_config.json", {"max_position_embeddings": 0}, "max_position_embeddings"),
    ("Qwen--Qwen3-8B_config.json", {"hidden_act": "<script>"}, "hidden_act"),
    ("deepseek-ai--DeepSeek-V3.2_config.json", {"num_nextn_predict_layers": -1}, "num_nextn_predict_layers"),
]


@pytest.mark.parametrize("src,changes,field", CONFIG_CASES, ids=[f for _, _, f in CONFIG_CASES])
def test_config_json_fields_are_checked(tmp_path, cli, src, changes, field):
    path = _mutated(tmp_path, src, **changes)
    done = cli(["project", "--arch", "h200", "--model", str(path), "--tp", "8", "--dtype", "fp8"], tmp_path)
    _one_line(done, field)
    assert str(path) in done.stderr  # the file is named


def test_a_config_with_a_key_twice_is_refused(tmp_path, cli):
    path = tmp_path / "config.json"
    text = (CONFIGS / "Qwen--Qwen3-8B_config.json").read_text().replace('"hidden_size"', '"hidden_size": 8,\n  "hidden_size"', 1)
    path.write_text(text)
    _one_line(cli(["project", "--arch", "h200", "--model", str(path)], tmp_path), "appears twice")


def test_a_real_config_still_loads(tmp_path, cli):
    done = cli(["project", "--arch", "h200", "--model", str(CONFIGS / "Qwen--Qwen3-8B_config.json")], tmp_path)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("value", ["abc", "1e308", "0", "-5", "nan"])
def test_host_cost_measurements_are_checked(tmp_path, cli, monkeypatch, value):
    """$PERFMODEL_HOST_COSTS names a measurement folder: its figures are read checked, and a bad one is blamed on
    the file and column that hold it (it had been blamed on hardware/h200-sxm.yaml, or given a 300-digit TTFT)."""
    import shutil

    folder = tmp_path / "hf"
    folder.mkdir()
    src = repo_root() / "calibration" / "h200" / "hf"
    shutil.copy(src / "kernels.csv", folder / "kernels.csv")
    lines = (src / "host.csv").read_text().splitlines()
    head = lines[0].split(",")
    col = head.index("wall_us")
    out = [lines[0]]
    for line in lines[1:]:
        cells = line.split(",")
        if cells[0] == "decode_step" and cells[1] == "decode_forward_nosync":
            cells[col] = value
        out.append(",".join(cells))
    (folder / "host.csv").write_text("\n".join(out) + "\n")
    monkeypatch.setenv("PERFMODEL_HOST_COSTS", str(folder))
    done = cli(["project", "--arch", "h200", "--model", "llama8b", "--engine", "hf"], tmp_path)
    _one_line(done, "wall_us")
    assert "host.csv" in done.stderr and "h200-sxm.yaml" not in done.stderr


def test_an_output_never_replaces_a_file_of_an_input_folder(tmp_path):
    import shutil

    src = tmp_path / "h200"
    shutil.copytree(repo_root() / "calibration" / "h200", src, ignore=shutil.ignore_patterns("hf", "clock-course",
                                                                                             "launch-paths"))
    before = (src / "profile.json").read_bytes()
    done = _process(["backtest", "--source", str(src), "--out", str(src / "profile.json")], tmp_path)
    _one_line(done, "--out")
    assert (src / "profile.json").read_bytes() == before


def test_a_training_parameter_of_zero_is_refused_at_load(tmp_path):
    prof = json.loads((repo_root() / "calibration" / "h200" / "profile.json").read_text())
    prof["training"]["adamw_eta"] = 0
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "profile.json").write_text(json.dumps(prof))
    done = _process(["train", "--arch", "h200", "--model", "llama8b", "--gpus", "8", "--global-batch", "8", "--seq",
                     "4096", "--calibration", str(tmp_path / "p")], tmp_path)
    _one_line(done, "training.adamw_eta")


@pytest.mark.parametrize("kind", ["newlines", "deep"])
def test_sustained_caps_what_it_reads(tmp_path, cli, kind):
    """A 1.2 MB gzip of 1.2 GB of newlines ran for minutes; a row nested 100,000 deep raised RecursionError."""
    import gzip
    import shutil
    import time

    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copy(repo_root() / "calibration" / "h200-sxm-trtllm" / "environment.json", folder)
    if kind == "newlines":
        with gzip.open(folder / "measurements.jsonl.gz", "wb") as fh:
            for _ in range(3):  # 3 million lines, past the cap of two
                fh.write(b"\n" * (1 << 20))
    else:
        (folder / "measurements.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    t0 = time.perf_counter()
    done = cli(["sustained", str(folder)], tmp_path)
    assert time.perf_counter() - t0 < 60
    _one_line(done, "not a measurement file")


def test_rows_outside_any_gpu_time_are_not_read():
    from perfmodel.fit.latency import well_formed

    row = {"id": "a", "kind": "gemm", "params": {}}
    assert well_formed({**row, "time_s": 1e-5})
    assert not well_formed({**row, "time_s": 1e-300}) and not well_formed({**row, "time_s": 1e30})


def test_a_large_sweep_plots_a_readable_chart(tmp_path):
    """A 1000 x 1000 sweep had drawn a 137 MB SVG: the chart keeps at most 12 lines of 400 points (the CSV keeps
    every point)."""
    from perfmodel.outputs.sweep import PLOT_LINES, PLOT_POINTS, parse_vary, run_sweep, sweep_svg
    from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile
    from perfmodel.scenario import Scenario

    hw = resolve_hardware("h200")
    axes = [parse_vary("hbm_bandwidth=1TB/s:10TB/s:900"), parse_vary("batch=1:64:40")]
    res = run_sweep(hw, resolve_model("llama8b"), Scenario().validated(), resolve_profile(None, hw), axes)
    svg = sweep_svg(res)
    assert svg.count("<path") == PLOT_LINES
    assert len(svg) < 200 * PLOT_LINES * PLOT_POINTS  # a marked point with its tooltip: ~140 bytes


def test_imported_table_cells_are_checked_before_conversion():
    """aiconfigurator tables: null, text, NaN, negative, zero and 10^18 cells had given tracebacks, a
    ZeroDivisionError (num_gpus 0) or absurd GEMMs; a dropped column a traceback; escapes reached the terminal."""
    from perfmodel.errors import InputError
    from perfmodel.imports.aiconfigurator import checked_columns, convert_gemm, convert_nccl

    cols = {"kernel_source": ["cutlass", "\x1b[31mred", "x", "x", "x", "x", "x"],
            "gemm_dtype": ["float16"] * 7,
            "m": [16, None, "16", float("nan"), -4, 0, 16],
            "n": [4096] * 7, "k": [4096, 4096, 4096, 4096, 4096, 4096, 10**18],
            "latency": [0.01] * 7}
    kept, dropped = checked_columns(cols, Path("gemm_perf.parquet"), "gemm_perf")
    assert dropped == 6 and kept["m"] == [16]
    assert all("\x1b" not in k for k in kept["kernel_source"])
    assert len(convert_gemm(kept).rows) == 1
    with pytest.raises(InputError) as e:
        checked_columns({"m": [1], "latency": [0.01]}, Path("gemm_perf.parquet"), "gemm_perf")
    assert e.value.field == "n" and "gemm_perf.parquet" in str(e.value)
    nccl, dropped = checked_columns({"op_name": ["all_reduce"] * 2, "nccl_dtype": ["half"] * 2, "num_gpus": [0, 8],
                                     "message_size": [1024, 1024], "latency": [0.01, 0.01]},
                                    Path("nccl_perf.parquet"), "nccl_perf")
    assert dropped == 1 and len(convert_nccl(nccl).rows) == 1


def test_a_csv_field_over_the_csv_limit_is_one_line(tmp_path, cli):
    """A serve trace, a validation table, a host-cost CSV: a field over csv's 128 KiB limit had raised _csv.Error."""
    trace = tmp_path / "w.csv"
    trace.write_text("arrival_s,isl,osl\n0," + "1" * 200_000 + ",10\n")
    _one_line(cli(["serve", "--arch", "h200", "--model", "llama8b", "--arrival", "trace", str(trace)], tmp_path),
              "not a CSV row")
    table = tmp_path / "v.csv"
    table.write_text("id,kind,model,hardware\n1,inference,llama8b," + "x" * 200_000 + "\n")
    _one_line(cli(["validate", "--csv", str(table)], tmp_path), "not a CSV row")


def test_a_sidecar_that_does_not_match_its_trace_is_one_line(tmp_path, cli):
    """`layers: 5000` in the sidecar of a two-layer trace had read 0.0 us a layer with exit 0."""
    import shutil

    src = repo_root() / "tests" / "data" / "traces"
    shutil.copy(src / "synthetic_llama_prefill.json.gz", tmp_path)
    side = json.loads((src / "synthetic_llama_prefill.sidecar.json").read_text())
    side["model"]["layers"] = 5000
    (tmp_path / "synthetic_llama_prefill.sidecar.json").write_text(json.dumps(side))
    done = cli(["trace", "import", str(tmp_path / "synthetic_llama_prefill.json.gz"), "--arch", "h200"], tmp_path)
    _one_line(done, "model.layers")
    assert "sidecar.json" in done.stderr


def test_an_import_never_writes_into_another_calibration(tmp_path):
    """`import --out` into a folder holding another part's calibration had mixed them (a later fit labelled H200
    rows as H100's)."""
    import shutil

    held = tmp_path / "held"
    shutil.copytree(repo_root() / "calibration" / "h100-sxm-trtllm", held)
    before = sorted((p.name, p.stat().st_size) for p in held.iterdir())
    done = _process(["import", "aiconfigurator", "--system", "h200_sxm", "--engine", "trtllm", "--out", str(held)],
                tmp_path)
    if "pip install" in done.stderr:
        pytest.skip("aiconfigurator-core is not installed")
    _one_line(done, "h100_sxm / trtllm")
    assert sorted((p.name, p.stat().st_size) for p in held.iterdir()) == before
