"""A training projection as an xlsx workbook (openpyxl) or as CSV tables.

Sheets: Summary (the metrics, tokens/s and TFLOP/s as live formulas of the step time), Breakdown (the step
time by part, summed by a formula), Memory (per-GPU bytes, total and fits as formulas), Ops (each operator's
one-run and per-micro-batch time, the total a formula), Scenario, Assumptions. Text a user supplied is made
safe for a spreadsheet (a leading ``=``, ``+``, ``-`` or ``@`` gets an apostrophe).
"""
from __future__ import annotations

import io

from ..io import csv_dicts_text, csv_safe
from ..outputs.common import require_openpyxl
from .project import TrainProjection
from .serialize import DEFINITIONS, csv_row, op_row, scenario_dict


def _cell(v):
    """A workbook cell: text that a spreadsheet would run as a formula gets an apostrophe (perfmodel.io)."""
    return csv_safe(v) if isinstance(v, str) else v


def workbook_bytes(p: TrainProjection, *, argv: list[str] | None = None) -> bytes:
    openpyxl = require_openpyxl()
    from openpyxl.styles import Font

    from ..outputs.common import command_line

    wb = openpyxl.Workbook()
    bold = Font(bold=True)
    s = p.scenario

    ws = wb.active
    ws.title = "Summary"
    ws.append(["metric", "value", "unit", "definition"])
    rows = [
        ("step time", p.step_time_s, "s", DEFINITIONS["step_time_s"]),
        ("tokens per step", s.tokens_per_step, "tokens", "global_batch x seq"),
        ("GPUs", s.gpus, "", ""),
        ("model FLOPs per step", p.model_flops, "FLOP", DEFINITIONS["model_tflops_per_gpu"]),
        ("hardware FLOPs per step", p.hardware_flops, "FLOP", DEFINITIONS["hardware_tflops_per_gpu"]),
        ("dense peak of the format", p.model_tflops_per_gpu * 1e12 / p.mfu if p.mfu else 0.0, "FLOP/s", ""),
    ]
    for r in rows:
        ws.append([_cell(x) for x in r])
    ws.append(["tokens/s", "=B3/B2", "tokens/s", DEFINITIONS["tokens_per_s"]])
    ws.append(["model TFLOP/s per GPU", "=B5/(B2*B4)/1e12", "TFLOP/s", DEFINITIONS["model_tflops_per_gpu"]])
    ws.append(["hardware TFLOP/s per GPU", "=B6/(B2*B4)/1e12", "TFLOP/s", DEFINITIONS["hardware_tflops_per_gpu"]])
    ws.append(["MFU", "=B5/(B2*B4)/B7", "", DEFINITIONS["mfu"]])
    ws.append(["bubble fraction", p.bubble_fraction, "", DEFINITIONS["bubble_fraction"]])
    ws.append(["exposed communication", p.exposed_comm_s, "s", DEFINITIONS["exposed_comm_s"]])
    ws.append(["calibration", _cell(p.profile.label), "", ""])
    ws.append(["command", _cell(command_line(argv)), "", ""])
    for c in ws[1]:
        c.font = bold

    ws = wb.create_sheet("Breakdown")
    ws.append(["part", "seconds per step"])
    for k, v in p.breakdown.items():
        ws.append([k, v])
    n = len(p.breakdown)
    ws.append(["step time", f"=SUM(B2:B{n + 1})"])
    for c in ws[1]:
        c.font = bold

    ws = wb.create_sheet("Memory")
    m = p.memory
    ws.append(["part", "bytes per GPU"])
    parts = ("weights", "gradients", "optimizer_states", "activations", "activation_working", "reserve")
    for k in parts:
        ws.append([k.replace("_", " "), getattr(m, k)])
    ws.append(["total", f"=SUM(B2:B{len(parts) + 1})"])
    ws.append(["usable capacity", m.capacity])
    ws.append(["fits", f"=B{len(parts) + 2}<=B{len(parts) + 3}"])
    ws.append(["pipeline stage", m.stage])
    for c in ws[1]:
        c.font = bold

    ws = wb.create_sheet("Ops")
    cols = ["name", "pass", "role", "kind", "count", "flops", "bytes", "time_s", "exposed_s", "total_s", "bound"]
    ws.append(cols)
    for i, x in enumerate(p.ops, start=2):
        r = op_row(x)
        row = [_cell(r[c]) for c in cols]
        row[cols.index("total_s")] = f"=I{i}*E{i}"
        ws.append(row)
    for c in ws[1]:
        c.font = bold

    ws = wb.create_sheet("Scenario")
    ws.append(["field", "value"])
    for k, v in scenario_dict(p).items():
        ws.append([k, _cell(v if isinstance(v, (int, float, str, bool)) or v is None else str(v))])
    ws.append(["hardware", _cell(p.hardware.name)])
    ws.append(["model", _cell(p.model.name)])
    for c in ws[1]:
        c.font = bold

    ws = wb.create_sheet("Assumptions")
    for a in p.assumptions:
        ws.append([_cell(a)])

    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


def summary_csv(p: TrainProjection) -> str:
    row = csv_row(p)
    return csv_dicts_text(list(row), [row])


def ops_csv(p: TrainProjection) -> str:
    cols = ["name", "pass", "role", "kind", "count", "flops", "bytes", "model_flops", "time_s", "exposed_s",
            "total_s", "bound"]
    return csv_dicts_text(cols, [op_row(x) for x in p.ops])
