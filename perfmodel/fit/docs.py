"""The calibration's validation as a document: tables and predicted-against-measured plots.

    python -m perfmodel.fit.docs calibration/h200 docs/calibration-h200

reads ``validation.json`` (written by ``perfmodel fit``) and writes ``README.md`` with per-class median and
P90 absolute error on held-out shapes, and one SVG scatter per operator class and for whole layers.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..io import write_text_atomic
from ..outputs.charts import Series, line_chart
from .power import report_text
from .training import training_markdown

def scatter(rows: list[dict], title: str, name: str) -> str:
    held = [r for r in rows if r.get("held_out", True)]
    train = [r for r in rows if not r.get("held_out", True)]
    pts = [r["measured_s"] * 1e6 for r in rows] + [r["predicted_s"] * 1e6 for r in rows]
    lo, hi = min(pts), max(pts)
    series = [Series("measured = predicted", [lo, hi], [lo, hi], "#9aa3ab"),
              Series("fitted shapes", [r["measured_s"] * 1e6 for r in train], [r["predicted_s"] * 1e6 for r in train],
                     "#7fb2dc", [r["id"] for r in train]),
              Series("held-out shapes", [r["measured_s"] * 1e6 for r in held], [r["predicted_s"] * 1e6 for r in held],
                     "#e07b39", [r["id"] for r in held])]
    return line_chart([s for s in series if s.xs], title=title, xlabel="measured (us)", ylabel="predicted (us)",
                      logx=True, logy=True, name=name, connect={"measured = predicted"})


def _attention_by_phase(rows: list[dict]) -> list[str]:
    """Held-out attention rows per backend and phase (prefill: many queries; decode: one a sequence)."""
    import statistics

    groups: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r["class"].split()[0] != "attention" or not r["held_out"]:
            continue
        phase = "decode" if "|seq_q=1|" in r["id"] else "prefill"
        groups.setdefault((r["class"], phase), []).append(abs(r["error"]))
    if not groups:
        return []
    out = ["Held-out attention by phase:", "", "| class | phase | shapes | median abs error | P90 abs error |",
           "|---|---|---|---|---|"]
    for (cls, phase), errs in sorted(groups.items()):
        errs.sort()
        p90 = errs[min(len(errs) - 1, int(round(0.9 * (len(errs) - 1))))]
        out.append(f"| {cls} | {phase} | {len(errs)} | {statistics.median(errs):.1%} | {p90:.1%} |")
    return out


def write_docs(calibration: Path, out: Path) -> Path:
    data = json.loads((calibration / "validation.json").read_text())
    prof = json.loads((calibration / "profile.json").read_text())
    summary = data["summary"]
    lines = [f"# Calibration `{prof['name']}`: predicted against measured", "",
             f"{prof['description']}. Profile: `{calibration}/profile.json`; raw rows: `{calibration}/measurements.jsonl`;",
             f"made by `{prof['provenance'].get('command', 'perfmodel fit')}`. Held-out shapes were never seen by the fit;",
             "whole decoder layers are only predicted, never fitted. Standalone rows are single operators timed on their own",
             "(events, L2 flushed); in-stream rows are the same operators replayed back to back inside a CUDA graph.", "",
             "| split | class | shapes | median abs error | P90 abs error |", "|---|---|---|---|---|"]
    for split in ("held_out", "train"):
        for cls, e in summary["ops"].get(split, {}).items():  # the fit's own order: gemm, attention per backend, ...
            if e:
                lines.append(f"| {split.replace('_', '-')} | {cls} | {e['n']} | {e['median_abs_error']:.1%} | "
                             f"{e['p90_abs_error']:.1%} |")
    for phase, e in summary.get("layers", {}).items():
        lines.append(f"| whole layers | {phase} | {e['n']} | {e['median_abs_error']:.1%} | {e['p90_abs_error']:.1%} |")
    lines += ["", *_attention_by_phase(data["ops"]), ""]
    out.mkdir(parents=True, exist_ok=True)
    device = prof.get("device") or prof["name"]
    for cls in ("gemm", "attention", "memory"):
        rows = [r for r in data["ops"] if r["class"].split()[0] == cls]
        if cls == "attention":  # what plain PyTorch runs: the default dispatch, timed alone and in a stream
            rows = [r for r in rows if "default" in r["class"]] or rows
        if rows:
            name = f"{cls}.svg"
            title = f"{cls}{' (PyTorch default dispatch)' if cls == 'attention' else ''}: predicted against measured"
            write_text_atomic(out / name, scatter(rows, f"{title} ({device})", cls))
            lines.append(f"![{cls}]({name})")
    layers = [dict(r, held_out=True) for r in data["layers"]]
    if layers:
        write_text_atomic(out / "layers.svg", scatter(layers, "whole decoder layers (never fitted)", "layers"))
        lines.append("![layers](layers.svg)")
    lines.append("")
    lines.append("## Whole decoder layers")
    lines.append("")
    lines.append("| layer | measured (us) | predicted (us) | error |")
    lines.append("|---|---|---|---|")
    for r in data["layers"]:
        short = r["id"].replace("layer|bf16|", "")
        lines.append(f"| `{short}` | {r['measured_s'] * 1e6:.1f} | {r['predicted_s'] * 1e6:.1f} | {r['error']:+.1%} |")
    text = "\n".join(lines) + "\n"
    if data.get("training"):
        text += "\n" + training_markdown(data["training"])
    if data.get("power"):
        text += "\n## Power\n\nEnergy of sustained loops (NVML's energy counter); whole layers are held out.\n\n```\n" \
                + report_text(data["power"]) + "\n```\n"
    path = out / "README.md"
    write_text_atomic(path, text)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("calibration", type=Path)
    ap.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    print(write_docs(args.calibration, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
