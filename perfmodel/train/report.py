"""The HTML report of a training projection: one self-contained file (inline CSS and SVG, no script).

Rendered with jinja2 from ``templates/train_report.html.j2`` with autoescape on, so every name a user
supplies (model, hardware, file paths, the command line) comes out as text.
"""
from __future__ import annotations

import datetime as _dt

from .. import __version__
from ..spec import SPEC_FIELDS, spec_value
from ..units import format_si
from .project import TrainProjection
from .serialize import DEFINITIONS, layout, seconds_text

COLORS = {"forward": "#4e79a7", "backward": "#f28e2b", "recompute": "#76b7b2",
          "communication (exposed, in the pipeline)": "#e15759", "pipeline bubble": "#bab0ac",
          "gradient reduce and parameter gather (exposed)": "#b07aa1", "optimizer": "#59a14f"}
MEMORY_COLORS = {"weights": "#4e79a7", "gradients": "#f28e2b", "optimizer_states": "#59a14f",
                 "activations": "#e15759", "activation_working": "#ff9da7", "reserve": "#bab0ac"}


def _bar(parts: list[tuple[str, float, str]], total: float, width: int = 720, height: int = 26) -> list[dict]:
    """Rectangles of a horizontal stacked bar (x, width, colour, label), in SVG user units."""
    out, x = [], 0.0
    for label, value, color in parts:
        if value <= 0 or total <= 0:
            continue
        w = width * value / total
        out.append({"x": round(x, 2), "w": round(w, 2), "color": color, "label": label,
                    "share": value / total})
        x += w
    return out




def context(p: TrainProjection, *, argv: list[str] | None = None,
            alternatives: list[TrainProjection] | None = None) -> dict:
    from ..outputs.common import command_line, spec_files

    s = p.scenario
    m = p.memory
    breakdown = [(k, v, COLORS.get(k, "#999")) for k, v in p.breakdown.items()]
    mem_parts = [(k.replace("_", " "), getattr(m, k), MEMORY_COLORS[k]) for k in MEMORY_COLORS]
    cap = max(m.capacity, m.total)
    ops = sorted(p.ops, key=lambda x: -x.total)
    hw_rows = []
    for f in SPEC_FIELDS:
        v = spec_value(p.hardware, f.attr)
        if v is None:
            continue
        fig = p.hardware.figures.get(f.path)
        unit = {"flop_rate": "FLOP/s", "bandwidth": "B/s", "bytes": "B", "frequency": "Hz", "time": "s",
                "power": "W"}.get(f.dimension, "")
        hw_rows.append({"label": f.label, "value": format_si(v, unit) if unit else f"{v:g}",
                        "source": fig.source if fig else "derived", "ref": (fig.ref or fig.note) if fig else ""})
    return {
        "tool": f"perfmodel {__version__}",
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "title": f"{p.model.name} training on {s.gpus} x {p.hardware.name}",
        "model": p.model, "hw": p.hardware, "s": s, "layout": layout(s),
        "schedule": s.schedule + (f" (v={s.chunks})" if s.chunks > 1 else ""),
        "metrics": [
            ("Step time", seconds_text(p.step_time_s)),
            ("Tokens/s", f"{p.tokens_per_s:,.0f}"),
            ("Model TFLOP/s per GPU", f"{p.model_tflops_per_gpu:.1f}"),
            ("MFU", f"{p.mfu:.1%}"),
            ("Hardware TFLOP/s per GPU", f"{p.hardware_tflops_per_gpu:.1f}"),
            ("Pipeline bubble", f"{p.bubble_fraction:.1%}"),
            ("Exposed communication", seconds_text(p.exposed_comm_s)),
            ("Memory per GPU", f"{format_si(m.total, 'B')} of {format_si(m.capacity, 'B')}"
                               + (" (fits)" if m.fits else " (DOES NOT FIT)")),
        ],
        "breakdown": [{"label": k, "time": seconds_text(v), "share": v / p.step_time_s if p.step_time_s else 0.0,
                       "color": c} for k, v, c in breakdown if v > 0],
        "time_bar": _bar(breakdown, p.step_time_s),
        "memory": [{"label": k, "bytes": format_si(v, "B"), "color": c} for k, v, c in mem_parts if v > 0],
        "memory_bar": _bar(mem_parts, cap),
        "capacity_x": round(720 * m.capacity / cap, 2),
        "fits": m.fits, "memory_stage": m.stage,
        "stages": [{"k": k, "f": seconds_text(st.forward), "b": seconds_text(st.backward), "w": seconds_text(st.weight_grad),
                    "slowest": k == p.slowest_stage} for k, st in enumerate(p.stages)][:64],
        "more_stages": max(0, len(p.stages) - 64),
        "ops": [{"name": x.top.name, "pass": x.top.pass_, "kind": x.top.op.kind, "count": f"{x.count:.4g}",
                 "time": seconds_text(x.time), "total": seconds_text(x.total), "bound": x.bound} for x in ops[:60]],
        "more_ops": max(0, len(ops) - 60),
        "slowest_stage": p.slowest_stage,
        "alternatives": [{"layout": layout(a.scenario) + (", SP" if a.scenario.sequence_parallel else ""),
                          "mb": a.scenario.micro_batch,
                          "schedule": a.scenario.schedule + (f" v={a.scenario.chunks}" if a.scenario.chunks > 1 else ""),
                          "recompute": a.scenario.recompute, "step": seconds_text(a.step_time_s), "mfu": f"{a.mfu:.1%}",
                          "memory": format_si(a.memory.total, "B")} for a in (alternatives or [])],
        "assumptions": p.assumptions,
        "definitions": DEFINITIONS,
        "calibration": p.profile.label,
        "hardware_rows": hw_rows,
        "spec_files": spec_files(p.hardware),
        "command": command_line(argv),
    }


def render_train_report(p: TrainProjection, *, argv: list[str] | None = None,
                        alternatives: list[TrainProjection] | None = None) -> str:
    import jinja2

    from ..paths import templates_dir

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                             autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
                             undefined=jinja2.StrictUndefined)
    return env.get_template("train_report.html.j2").render(**context(p, argv=argv, alternatives=alternatives))
