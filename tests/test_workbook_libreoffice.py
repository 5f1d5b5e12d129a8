"""The what-if workbook recalculated by a real spreadsheet: LibreOffice headless (``apt-get install
libreoffice-calc``; skipped without it). MoE workbooks showed #NUM! there (the expert-count power underflowed)
while the Python formula engine read 0."""
from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest

from perfmodel.cli import main
from perfmodel.projection import project

SOFFICE = shutil.which("soffice") or shutil.which("libreoffice")
pytestmark = pytest.mark.skipif(SOFFICE is None, reason="LibreOffice (soffice) is not installed")

ERRORS = ("#NUM!", "#VALUE!", "#DIV/0!", "#REF!", "#NAME?", "#N/A", "Err:")
# every sheet as CSV, formulas recalculated on load (the workbook carries no cached values)
CSV_ALL_SHEETS = "csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,false,false,false,-1"


def _recalculated(xlsx: Path, out: Path) -> dict[str, list[list[str]]]:
    subprocess.run([SOFFICE, "--headless", "--calc", "--convert-to", CSV_ALL_SHEETS, "--outdir", str(out),
                    str(xlsx)], check=True, capture_output=True, timeout=180)
    return {p.stem.split("-", 1)[1]: list(csv.reader(p.open(encoding="utf-8"))) for p in out.glob("*.csv")}


@pytest.mark.parametrize("args,scenario", [
    (["--model", "mixtral-8x7b", "--batch", "max", "--isl", "2048"], dict(batch="max", isl=2048)),
    (["--model", "deepseek-v3", "--tp", "8", "--dtype", "fp8", "--batching", "static", "--batch", "64"],
     dict(tp=8, dtype="fp8", batching="static", batch=64)),
    # attention data parallelism: the busiest rank's ceil(batch / DP) sequences, the MoE over every rank's tokens
    (["--model", "deepseek-v3", "--tp", "1", "--attention-dp", "8", "--ep", "8", "--dtype", "fp8", "--batch", "12"],
     dict(tp=1, attention_dp=8, ep=8, dtype="fp8", batch=12)),
    # vLLM 0.12's DeepGEMM path: the padded blocks of the worst-case layout as their own products
    (["--model", "qwen3-235b-a22b-fp8", "--tp", "2", "--dtype", "fp8", "--engine", "vllm", "--moe-padding", "computed",
      "--batch", "16"], dict(tp=2, dtype="fp8", engine="vllm", moe_padding="computed", batch=16)),
])
def test_moe_workbooks_recalculate_in_libreoffice_without_errors(tmp_path, capsys, args, scenario):
    xlsx = tmp_path / "w.xlsx"
    assert main(["export", "--arch", "h200", *args, "--format", "xlsx", "--out", str(xlsx)]) == 0
    capsys.readouterr()
    sheets = _recalculated(xlsx, tmp_path / "csv")
    bad = [(name, i, cell) for name, rows in sheets.items() for i, row in enumerate(rows) for cell in row
           if cell.startswith(ERRORS)]
    assert not bad, bad[:5]
    summary = {row[-1]: row[1] for row in sheets["Summary"] if row and row[-1] in ("ttft_s", "tpot_s")}
    model = args[args.index("--model") + 1]
    p = project("h200", model, **scenario)
    assert float(summary["ttft_s"]) == pytest.approx(p.ttft_s, rel=1e-6)
    assert float(summary["tpot_s"]) == pytest.approx(p.tpot_s, rel=1e-6)
