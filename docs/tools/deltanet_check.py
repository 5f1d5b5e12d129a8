"""Gated DeltaNet's recurrence measured on the lent GPU against the graph's estimate of it.

Reads the rows :mod:`perfmodel.measure.deltanet` wrote (flash-linear-attention's fused recurrent kernel for decode,
its chunked kernel for prefill, at Qwen3-Next's and Qwen3.5's heads over TP 1-8) and prices each as a projection
does: the ``linear.core`` operator the graph builds for that step (perfmodel/graph.py: _linear_attention), timed
standalone on the part the rows were measured on with the profile ``perfmodel project --engine torch`` composes
there. Prints, per phase and model, the measured time, the graph's and their ratio at each batch or prompt length
(median over TP degrees), and the median ratio per phase.

    python docs/tools/deltanet_check.py [--folder DIR] [--format table|markdown]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "calibration" / "h200" / "deltanet-h100-graph"


def measured(folder: Path) -> tuple[list[dict], dict]:
    path = folder / "measurements.jsonl"
    if not path.is_file():
        print(f"deltanet_check: error: no measurements at {path} (python -m perfmodel.measure.deltanet on a GPU "
              "writes them)", file=sys.stderr)
        raise SystemExit(2)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = [r for r in rows if r.get("kind") == "deltanet" and r.get("time_s")]
    env = next((r["env"] for r in rows if r.get("env")), {})
    return rows, env


def priced(row: dict, hw, prof) -> float:
    """Seconds of the graph's ``linear.core`` for the row's step, standalone."""
    from perfmodel.cost import time_op
    from perfmodel.graph import Step, build_ops
    from perfmodel.resolve import resolve_model
    from perfmodel.scenario import Scenario

    from dataclasses import replace

    p = row["params"]
    model = resolve_model(p["model"])
    # the measurement keeps an fp32 state (flash-linear-attention's default); price the same bytes
    model = replace(model, linear_attention=replace(model.linear_attention, state_dtype="fp32"))
    sc = Scenario(tp=p["tp"], engine="torch", batch=p["batch"]).validated().for_hardware(hw)
    step = (Step("decode", p["batch"], 1, 1024) if p["phase"] == "decode"
            else Step("prefill", p["batch"], p["tokens"], 0))  # the row's tokens are per sequence, as a Step's
    op = next(o for o in build_ops(model, step, sc) if o.name == "linear.core")
    return float(time_op(op, hw, prof, standalone=True).time)


def compare(folder: Path = FOLDER) -> dict:
    from perfmodel.fit.directory import match_spec
    from perfmodel.resolve import resolve_profile

    rows, env = measured(folder)
    hw = match_spec(env, None)
    prof = resolve_profile(None, hw, "torch")
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for r in rows:
        p = r["params"]
        size = (p["batch"], 1) if p["phase"] == "decode" else (p["batch"], p["tokens"])
        key = (p.get("launch", "eager"), p["phase"], p["model"], size)
        groups.setdefault(key, []).append((float(r["time_s"]), priced(r, hw, prof)))
    out = {"device": env.get("device_name", hw.name), "rows": {}, "streaming": []}
    for key, v in sorted(groups.items()):
        out["rows"][key] = {"n": len(v), "measured_us": statistics.median(m for m, _ in v) * 1e6,
                            "graph_us": statistics.median(g for _, g in v) * 1e6,
                            "ratio": statistics.median(m / g for m, g in v)}
    # decode steps whose state is large enough that the kernel streams it (the small ones and every prefill are
    # bound by the eager Python launches the measurement runs: no CUDA graph)
    for r in rows:
        if (r["params"]["phase"] == "decode" and r.get("state_bytes", 0) >= STREAMING_BYTES
                and r["params"].get("launch", "eager") == "eager"):
            out["streaming"].append((r["time_s"] / priced(r, hw, prof), 2.0 * r["state_bytes"] / r["time_s"]))
    return out


STREAMING_BYTES = 2.5e8  # a state this large takes over 100 us to stream, past the eager launches


def table(result: dict, markdown: bool) -> str:
    head = ("launch", "phase", "model", "batch / sequences x tokens", "TP degrees", "measured (us, median)",
            "graph (us, median)", "measured / graph")
    sep = " | "
    lines = ["| " + sep.join(head) + " |", "|" + "---|" * len(head)] if markdown else [sep.join(head)]
    for (launch, phase, model, size), v in result["rows"].items():
        shown = f"{size[0]:,}" if phase == "decode" else f"{size[0]} x {size[1]:,}"
        cells = (launch, phase, model, shown, str(v["n"]), f"{v['measured_us']:.1f}", f"{v['graph_us']:.1f}",
                 f"{v['ratio']:.2f}")
        lines.append("| " + sep.join(cells) + " |" if markdown else sep.join(cells))
    lines.append("")
    st = result["streaming"]
    if st:
        lines.append(f"Measured on the {result['device']}. Decode steps whose state streams (>= "
                     f"{STREAMING_BYTES / 1e6:.0f} MB, {len(st)} of them): measured / graph "
                     f"{statistics.median(r for r, _ in st):.2f} at the median ({min(r for r, _ in st):.2f}-"
                     f"{max(r for r, _ in st):.2f}), the state read and written at "
                     f"{statistics.median(b for _, b in st) / 1e12:.2f} TB/s (eager launches).")
    return "\n".join(lines)


def markdown() -> str:
    return table(compare(FOLDER), True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folder", type=Path, default=FOLDER)
    ap.add_argument("--format", choices=("table", "markdown"), default="table")
    args = ap.parse_args(argv)
    print(table(compare(args.folder), args.format == "markdown"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
