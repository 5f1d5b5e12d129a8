"""A MoE layer's shared experts on a second stream, measured (docs/engines.md): each layout's two paths alone, on
one stream and on two, the share of the shared path the second stream hides, and what the step accounting makes
of it (perfmodel.step_accounting.STREAM_HIDDEN).

    python docs/tools/streams_check.py
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

RUNS = ("calibration/h200/streams-h100", "calibration/h200/streams-h100-repeat")
# the same suite on another lent H100, a day later (a call that asked for an H200): a reproduction, not in the constant
AGAIN = ("calibration/h200/streams-h100-b", "calibration/h200/streams-h100-b-repeat")
# projections whose decode the rule changes: (part, model, engine, layout and format)
PROJECTIONS = (("b200", "deepseek-v3", "trtllm", dict(tp=8, dtype="fp4")),
               ("b200", "deepseek-v3", "sglang", dict(tp=8, ep=8, dtype="fp8")),
               ("b200", "kimi-k2.5", "vllm", dict(tp=8, dtype="fp4")),
               ("b200", "qwen3.5-397b-a17b", "sglang", dict(tp=8, dtype="fp8")))
BATCHES = (1, 16, 128)


def _rows(runs: tuple = RUNS) -> list[dict]:
    return [json.loads(line) for run in runs for line in (ROOT / run / "measurements.jsonl").open()]


def _times(rows) -> dict[tuple, dict[str, float]]:
    """Each layout's microseconds per path, keyed (model, TP, batch, run)."""
    from perfmodel.measure.streams import layer_times

    return {k: {p: t * 1e6 for p, t in v.items()} for k, v in layer_times(rows).items()}


def measured_table() -> str:
    from perfmodel.measure.streams import hidden_fractions

    rows = _rows()
    hidden = hidden_fractions(rows)
    times = _times(rows)
    lines = ["| model | TP | batch | routed path (us) | shared path (us) | one stream (us) | two streams (us) | "
             "shared path hidden (run / repeat) |", "|---|---|---|---|---|---|---|---|"]
    for key in sorted(k for k in times if k[3] == 0):
        t = times[key]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {t['main']:.1f} | {t['side']:.1f} | {t['serial']:.1f} | "
                     f"{t['streams']:.1f} | {hidden[key]:.2f} / {hidden[key[:3] + (1,)]:.2f} |")
    return "\n".join(lines)


def summary() -> str:
    from perfmodel.measure.streams import hidden_fractions
    from perfmodel.step_accounting import STREAM_HIDDEN

    rows = _rows()
    by_layout = hidden_fractions(rows)
    hidden = list(by_layout.values())
    times = _times(rows)

    def err(predict) -> str:
        us = [abs(predict(k, t) - t["streams"]) for k, t in times.items()]
        rel = [abs(predict(k, t) / t["streams"] - 1) for k, t in times.items()]
        return (f"{statistics.median(us):.1f} us, {statistics.median(rel) * 100:.1f}% | {max(us):.1f} us, "
                f"{max(rel) * 100:.1f}%")

    # held out by model: each model's layouts priced with the median share of the other three models' rows
    others = {m: statistics.median(v for k, v in by_layout.items() if k[0] != m) for m in {k[0] for k in by_layout}}

    again = list(hidden_fractions(_rows(AGAIN)).values())
    both = list(hidden_fractions(_rows(RUNS + AGAIN)).values())
    return "\n".join([
        f"Rows: {len(hidden)} layouts (two runs). Shared path hidden: median {statistics.median(hidden):.2f}, "
        f"{min(hidden):.2f} to {max(hidden):.2f}; the accounting takes {STREAM_HIDDEN:.2f}.\nThe same suite on another "
        f"H100 machine (`{AGAIN[0]}` and its repeat, 2026-12-06): median {statistics.median(again):.2f}, "
        f"{min(again):.2f} to {max(again):.2f}; over all four runs {statistics.median(both):.2f}.",
        "",
        "Two-stream time predicted from the one-stream run, median |error| against the measured two streams:",
        "",
        "| rule | median \\|error\\| | largest |",
        "|---|---|---|",
        f"| one stream minus {STREAM_HIDDEN:.2f} of the shared path (the accounting; in-sample: the median of these "
        f"rows) | {err(lambda k, t: t['serial'] - STREAM_HIDDEN * t['side'])} |",
        "| the same, each model held out (the median share of the other three models' rows, "
        f"{min(others.values()):.2f} to {max(others.values()):.2f}) | "
        f"{err(lambda k, t: t['serial'] - others[k[0]] * t['side'])} |",
        f"| one stream minus all of the shared path (the longer path alone) | "
        f"{err(lambda k, t: t['serial'] - t['side'])} |",
        f"| one stream (no overlap) | {err(lambda k, t: t['serial'])} |",
    ])


def projection_table() -> str:
    from perfmodel.projection import project

    head = " | ".join(f"batch {b}" for b in BATCHES)
    lines = [f"| part | model | engine | layout | {head} |", "|---|---|---|---|" + "---|" * len(BATCHES)]
    for part, model, engine, kw in PROJECTIONS:
        cells = []
        for b in BATCHES:
            args = dict(engine=engine, batch=b, isl=1024, osl=1024, batching="static", **kw)
            if engine == "vllm":
                args["shared_stream"] = "small"  # vLLM 0.12 and later
            on = project(part, model, **args).tpot_s
            off = project(part, model, **{**args, "shared_stream": "never"}).tpot_s
            cells.append(f"{off * 1e3:.2f} -> {on * 1e3:.2f} ms")
        layout = ", ".join(f"{k} {v}" for k, v in kw.items())
        lines.append(f"| {part} | {model} | {engine}{' >= 0.12' if engine == 'vllm' else ''} | {layout} | "
                     f"{' | '.join(cells)} |")
    return "\n".join(lines)


def markdown() -> str:
    return "\n\n".join([measured_table(), summary(),
                        "Static decode TPOT, shared experts on the same stream -> as the engine runs them:",
                        projection_table()])


if __name__ == "__main__":
    print(markdown())
