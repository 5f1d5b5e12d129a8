"""The command line: outputs people and programs read, and one clear line for every kind of bad input."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel.cli import main

ROOT = Path(__file__).resolve().parent.parent


def run(*args, capsys):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_project_table_names_the_answer(capsys):
    rc, out, _ = run("project", "--arch", "blackwell.yaml", "--model", "llama70b", capsys=capsys)
    assert rc == 0
    for word in ("TTFT", "TPOT", "throughput", "bound", "memory per GPU", "calibration"):
        assert word in out


def test_project_json_has_the_documented_fields(capsys):
    rc, out, _ = run("project", "--arch", "h200", "--model", "llama70b", "--tp", "2", "--dtype", "fp8",
                     "--isl", "2048", "--osl", "512", "--batch", "max", "--format", "json", capsys=capsys)
    assert rc == 0
    d = json.loads(out)
    for key in ("arch", "model", "scenario", "ttft_ms", "tpot_ms", "e2e_ms", "batch", "throughput_tok_s_per_gpu",
                "throughput_tok_s", "memory", "ops", "calibration"):
        assert key in d
    assert d["batch"] > 1
    assert d["throughput_tok_s"] == pytest.approx(2 * d["throughput_tok_s_per_gpu"])
    assert {"name", "phase", "kind", "flops", "bytes", "time_ms", "bound"} <= set(d["ops"][0])
    assert {"weights", "kv_cache", "activations", "workspace"} <= set(d["memory"])
    assert any(o["kind"] == "all_reduce" for o in d["ops"])


def test_project_csv_and_out_file(tmp_path, capsys):
    out = tmp_path / "p.csv"
    rc, _, _ = run("project", "--arch", "h100-sxm", "--arch", "b200", "--model", "llama8b", "--format", "csv",
                   "--out", str(out), capsys=capsys)
    assert rc == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["arch"] for r in rows] == ["h100-sxm", "b200"]
    assert float(rows[1]["tpot_ms"]) < float(rows[0]["tpot_ms"])


def test_step_json_has_layer_ms(capsys):
    rc, out, _ = run("step", "--arch", "h200", "--model", "llama8b", "--phase", "prefill", "--batch", "2",
                     "--seq", "1024", "--format", "json", capsys=capsys)
    assert rc == 0
    d = json.loads(out)
    assert 0 < d["layer_ms"] * 32 < d["time_ms"]
    rc, out, _ = run("step", "--arch", "h200", "--model", "llama8b", "--phase", "decode", "--batch", "8",
                     "--context", "4096", "--format", "json", capsys=capsys)
    d2 = json.loads(out)
    assert d2["context"] == 4096 and d2["seq"] == 1 and d2["time_ms"] > 0


def test_predict_adds_columns(tmp_path, capsys):
    src = tmp_path / "ops.csv"
    src.write_text(
        "op,m,n,k,dtype,batch,heads_q,heads_kv,seq_q,seq_kv,head_dim,causal,tokens,hidden,width,bytes\n"
        "gemm,4096,4096,4096,bf16,,,,,,,,,,,\n"
        "gemm,16,8192,8192,fp8,,,,,,,,,,,\n"
        "attention,,,,bf16,2,32,8,2048,2048,128,true,,,,\n"
        "attention,,,,bf16,16,32,8,1,4096,128,false,,,,\n"
        "rmsnorm,,,,bf16,,,,,,,,4096,8192,,\n"
        "swiglu,,,,bf16,,,,,,,,4096,,14336,\n"
        "copy,,,,,,,,,,,,,,,1073741824\n")
    dst = tmp_path / "out.csv"
    rc, _, err = run("predict", "--arch", "h200", "--ops", str(src), "--out", str(dst), capsys=capsys)
    assert rc == 0, err
    rows = list(csv.DictReader(dst.open()))
    assert len(rows) == 7
    for r in rows:
        assert float(r["time_ms"]) > 0 and r["bound"] and float(r["bytes"]) > 0
    assert float(rows[6]["bytes"]) == 1073741824  # the copy's input column is kept
    assert float(rows[0]["bytes"]) == 3 * 4096 * 4096 * 2
    assert rows[0]["bound"] == "compute" and rows[6]["bound"] == "memory"


def test_list_and_show(capsys):
    rc, out, _ = run("list", "hardware", capsys=capsys)
    assert rc == 0 and "h200-sxm" in out and "mi355x" in out
    rc, out, _ = run("list", "models", capsys=capsys)
    assert "llama-3.1-70b" in out and "deepseek-v3" in out
    rc, out, _ = run("show", "h100-sxm", capsys=capsys)
    assert "datasheet" in out and "989.4" in out
    rc, out, _ = run("show", "llama70b", capsys=capsys)
    assert "80" in out and "8192" in out


def test_validate_prints_median(capsys):
    from perfmodel.errors import InputError
    from perfmodel.validate import default_csv

    try:
        default_csv()
    except InputError:
        pytest.skip("../shared/reference/public_validation.csv is not beside this checkout")
    rc, out, _ = run("validate", capsys=capsys)
    assert rc == 0
    assert "median |error|" in out and "trt09-l2-70b-h200-tp1-128-128" in out


# --- bad input: one line on stderr, exit code 2, no traceback ------------------------------------------

def _bad(args, capsys, *needles):
    rc, out, err = run(*args, capsys=capsys)
    assert rc == 2
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_unknown_model_suggests(capsys):
    _bad(["project", "--arch", "h200", "--model", "llama-70"], capsys, "llama")


def test_unknown_arch_suggests(capsys):
    _bad(["project", "--arch", "h20O", "--model", "llama8b"], capsys, "h200")


def test_bad_spec_file(tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    spec.write_text("extends: " + str(ROOT / "hardware" / "h100-sxm.yaml") + "\nmemory:\n  bandwidth: {value: 4.8 TB, source: estimate}\n")
    _bad(["project", "--arch", str(spec), "--model", "llama8b"], capsys, "bad.yaml", "memory.bandwidth")


def test_bad_scenario_flags(capsys):
    _bad(["project", "--arch", "h200", "--model", "llama8b", "--batch", "lots"], capsys, "--batch")
    _bad(["project", "--arch", "h200", "--model", "llama8b", "--dtype", "fp7"], capsys, "--dtype")
    _bad(["project", "--arch", "h200", "--model", "llama8b", "--tp", "0"], capsys, "--tp")
    _bad(["project", "--arch", "h200", "--model", "mixtral", "--tp", "2", "--ep", "4"], capsys, "--ep")


def test_does_not_fit_says_what_would(capsys):
    line = _bad(["project", "--arch", "a100", "--model", "llama405b"], capsys, "needs", "usable")
    assert "--tp" in line


def test_predict_bad_tables(tmp_path, capsys):
    bad_kind = tmp_path / "k.csv"
    bad_kind.write_text("op,m,n,k,dtype\nconv,1,2,3,bf16\n")
    _bad(["predict", "--arch", "h200", "--ops", str(bad_kind)], capsys, "unknown op", "k.csv")
    bad_col = tmp_path / "c.csv"
    bad_col.write_text("op,m,n,k,dtype,colour\ngemm,1,2,3,bf16,red\n")
    _bad(["predict", "--arch", "h200", "--ops", str(bad_col)], capsys, "colour")
    missing = tmp_path / "m.csv"
    missing.write_text("op,m,n,dtype\ngemm,1,2,bf16\n")
    _bad(["predict", "--arch", "h200", "--ops", str(missing)], capsys, "'k'")
    bad_val = tmp_path / "v.csv"
    bad_val.write_text("op,m,n,k,dtype\ngemm,-4,2,3,bf16\n")
    _bad(["predict", "--arch", "h200", "--ops", str(bad_val)], capsys, "v.csv:2", "m")


def test_bad_hf_config(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text("{\"model_type\": \"llama\", \"hidden_size\": 4096")
    _bad(["project", "--arch", "h200", "--model", str(cfg)], capsys, "config.json")


def test_calibration_profile_missing(tmp_path, capsys):
    _bad(["project", "--arch", "h200", "--model", "llama8b", "--calibration", str(tmp_path)], capsys, "profile")


def test_cli_starts_without_heavy_imports():
    code = ("import sys; import perfmodel.cli as c; c.build_parser(); "
            "bad = [m for m in ('torch', 'matplotlib', 'pandas', 'scipy', 'openpyxl', 'jinja2') if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == ""


def test_module_entry_point_exit_code():
    r = subprocess.run([sys.executable, "-m", "perfmodel", "project", "--arch", "nope", "--model", "llama8b"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def _parsers(parser, path=("perfmodel",)):
    """(command path, parser) for the top-level parser and every subparser under it, depth first."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, path + (name,))


def test_every_option_has_help():
    """Every option and positional argument of every command (issue 19); the commands list their own help."""
    import argparse

    from perfmodel.cli import build_parser

    missing = [f"{' '.join(path)} {'/'.join(a.option_strings) or a.dest}"
               for path, parser in _parsers(build_parser()) for a in parser._actions
               if not a.help and not isinstance(a, argparse._SubParsersAction)]
    assert missing == [], "options without help text: " + ", ".join(missing)


def test_every_command_has_a_function():
    import argparse

    from perfmodel.cli import build_parser

    leaves = [(path, p) for path, p in _parsers(build_parser())
              if not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)]
    assert len(leaves) >= 20
    assert [" ".join(path) for path, p in leaves if not callable(p.get_default("func"))] == []


@pytest.mark.parametrize("args, needle", [
    (["project", "--arch", "h200", "--model", "llama8b", "--bogus"], "unrecognized arguments: --bogus"),
    (["step", "--arch", "h200", "--model", "llama8b"], "--phase"),
    (["project", "--arch", "h200", "--model", "llama8b", "--isl", "many"], "--isl"),
    (["project", "--arch", "h200", "--model", "llama8b", "--format", "yaml"], "invalid choice"),
    (["tune", "gemm", "--m", "1", "--n", "2", "--k", "3", "--nope"], "perfmodel tune gemm --help"),
    (["frobnicate"], "invalid choice"),
    ([], "required"),
])
def test_argparse_error_is_one_line_and_exit_2(args, needle, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("perfmodel: error: ") and needle in err, err


def test_argparse_error_from_the_entry_point():
    r = subprocess.run([sys.executable, "-m", "perfmodel", "project", "--arch", "h200", "--model", "llama8b",
                        "--bogus"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("perfmodel: error: unrecognized arguments: --bogus")


def test_package_level_project_is_the_function_even_after_the_module_loaded():
    """README: ``from perfmodel import project; project("b200", "llama70b")``."""
    import perfmodel.projection  # noqa: F401  (loading the module must not shadow the function)
    from perfmodel import project

    p = project("b200", "llama70b")
    assert p.ttft_s > 0 and p.tpot_s > 0
