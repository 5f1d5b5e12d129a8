"""Trace import on the committed SYNTHETIC fixture (tests/data/traces/make_fixture.py; not a measurement)."""
from __future__ import annotations

import csv
import gzip
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from perfmodel.profile import DEFAULTS
from perfmodel.spec import load_spec
from perfmodel.trace.mapping import kernel_class, read_sidecar, residual_rows
from perfmodel.trace.reader import read_trace

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "tests/data/traces"
TRACE = FIX / "synthetic_llama_prefill.json.gz"
HW = load_spec("h200")
sys.path.insert(0, str(FIX))
import make_fixture  # noqa: E402


def test_fixture_is_what_the_script_makes(tmp_path):
    made = make_fixture.write(tmp_path)
    assert gzip.decompress(made.read_bytes()) == gzip.decompress(TRACE.read_bytes())


def test_kernels_are_attributed_to_modules_by_correlation():
    ks = read_trace(TRACE)
    assert len(ks) == 3 + 2 * sum(len(k) for _, k in make_fixture.LAYER) + 6
    q = [k for k in ks if k.annotation == "perfmodel:model.layers.1.self_attn.q_proj"]
    assert len(q) == 1 and q[0].dur_s == pytest.approx(6.0e-6)
    core = [k for k in ks if k.annotation == "perfmodel:model.layers.0.self_attn" and "flash" in k.name]
    assert len(core) == 1


def test_residual_rows_measured_side_is_exact():
    rows, annotated = residual_rows(read_trace(TRACE), read_sidecar(FIX / "synthetic_llama_prefill.sidecar.json"),
                                    HW, DEFAULTS)
    assert annotated
    by = {r.name: r for r in rows}
    assert by["attn.norm"].measured_s == pytest.approx(8.4e-6) and by["attn.norm"].kernels == 5
    assert by["attn.rotary+cache"].measured_s == pytest.approx(sum(d for _, d in make_fixture.LAYER[4][1][:-1]) * 1e-6)
    assert by["attn.core"].measured_s == pytest.approx(9.0e-6)
    assert by["residual"].measured_s == pytest.approx(3.2e-6)
    assert by["ffn.swiglu"].measured_s == pytest.approx(4.2e-6)
    assert by["lm_head"].scope == "model" and by["lm_head"].measured_s == pytest.approx(12e-6)
    assert by["rotary tables"].predicted_s is None  # no operator in the graph: reported, not hidden
    for r in rows:
        if r.predicted_s is not None:
            assert r.predicted_s > 0 and r.error == pytest.approx(r.predicted_s / r.measured_s - 1.0)
    # the GEMM rows are predicted for the exact projection shapes: k and v are the same product
    assert by["attn.k_proj"].predicted_s == by["attn.v_proj"].predicted_s
    assert by["attn.q_proj"].params == {"m": 128, "n": 512, "k": 512, "dtype": "bf16", "groups": 1}


def test_without_annotations_falls_back_to_kernel_families(tmp_path):
    trace = make_fixture.write(tmp_path, annotate=False)
    rows, annotated = residual_rows(read_trace(trace), read_sidecar(tmp_path / "synthetic_llama_prefill.sidecar.json"),
                                    HW, DEFAULTS)
    assert not annotated
    fam = {r.name: r for r in rows}
    assert fam["family: gemm"].kernels == 2 * 7 + 1 and fam["family: gemm"].predicted_s > 0
    assert fam["family: attention"].kernels == 2


def test_kernel_name_patterns():
    assert kernel_class(make_fixture.GEMM) == "gemm"
    assert kernel_class(make_fixture.FLASH) == "attention"
    assert kernel_class("void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel>") == "elementwise"
    assert kernel_class("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NTN") == "gemm"
    assert kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") == "attention"


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "perfmodel", *args], capture_output=True, text=True, cwd=ROOT)


def test_cli_import_writes_csv_svg_and_refits(tmp_path, capsys):
    from perfmodel.cli import main

    r = _cli("trace", "import", str(TRACE), "--calibration", "none", "--out-dir", str(tmp_path),
             "--refit", str(tmp_path / "refit.json"))
    assert r.returncode == 0, r.stderr
    assert "attn.q_proj" in r.stdout and "refit:" in r.stdout
    rows = list(csv.DictReader((tmp_path / "synthetic_llama_prefill.residuals.csv").open()))
    assert {"operator", "measured_us", "predicted_us", "error"} <= set(rows[0])
    svg = (tmp_path / "synthetic_llama_prefill.residuals.svg").read_text()
    assert svg.startswith("<svg") and "attn.core" in svg
    prof = json.loads((tmp_path / "refit.json").read_text())
    assert prof["fitted"] and "traces" in prof["provenance"]
    # the refit moves the model toward the trace (in this process: the entry point is the one run above)
    capsys.readouterr()
    assert main(["trace", "import", str(TRACE), "--calibration", "none", "--out-dir", str(tmp_path),
                 "--format", "json"]) == 0
    before = _median_abs(capsys.readouterr().out)
    assert main(["trace", "import", str(TRACE), "--calibration", str(tmp_path / "refit.json"), "--out-dir",
                 str(tmp_path), "--format", "json"]) == 0
    after = _median_abs(capsys.readouterr().out)
    assert after < before


def _median_abs(text: str) -> float:
    return json.loads(text)["summary"]["median_abs_error"]


def test_nsys_sqlite_export(tmp_path):
    db = tmp_path / "run.sqlite"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE StringIds (id INTEGER, value TEXT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, shortName INTEGER, correlationId INTEGER);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, correlationId INTEGER);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, text TEXT);
        INSERT INTO StringIds VALUES (1, 'sm90_xmma_gemm_bf16'), (2, 'flash_fwd_kernel');
        INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1000, 6000, 1, 7), (7000, 16000, 2, 8);
        INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (500, 7), (600, 8);
        INSERT INTO NVTX_EVENTS VALUES (400, 700, 'perfmodel:model.layers.0.self_attn'),
                                       (450, 550, 'perfmodel:model.layers.0.self_attn.q_proj');
    """)
    con.close()
    ks = read_trace(db)
    assert [k.annotation for k in ks] == ["perfmodel:model.layers.0.self_attn.q_proj", "perfmodel:model.layers.0.self_attn"]
    assert ks[0].dur_s == pytest.approx(5e-6)


@pytest.mark.parametrize("content,field", [
    (b"not json", "not a JSON trace"),
    (b'{"traceEvents": []}', "no GPU kernel events"),
    (b'{"foo": 1}', "traceEvents"),
])
def test_bad_traces_one_line_exit_2(tmp_path, cli, content, field):
    t = tmp_path / "t.json"
    t.write_bytes(content)
    (tmp_path / "t.sidecar.json").write_text((FIX / "synthetic_llama_prefill.sidecar.json").read_text())
    r = cli(["trace", "import", str(t), "--calibration", "none"], ROOT)
    assert r.returncode == 2 and field in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_bad_sidecar_names_the_field(tmp_path, cli):
    side = json.loads((FIX / "synthetic_llama_prefill.sidecar.json").read_text())
    side["model"]["heads"] = 0
    p = tmp_path / "s.json"
    p.write_text(json.dumps(side))
    r = cli(["trace", "import", str(TRACE), "--sidecar", str(p), "--calibration", "none", "--out-dir", str(tmp_path)],
            ROOT)
    assert r.returncode == 2 and "model.heads" in r.stderr
    r = cli(["trace", "import", str(tmp_path / "missing.json"), "--calibration", "none"], ROOT)
    assert r.returncode == 2
