"""MoE expert products of training measured on the H200 against the training graph's price, before and after the fit.

Reads the rows :mod:`perfmodel.measure.grouped_gemm` wrote (``calibration/h200/grouped-gemm``) and prices each the
way ``perfmodel train`` prices an expert product on the H200 (:func:`perfmodel.fit.training.grouped_op`: the forward
as per-expert products over the local experts, its data and weight gradients as
:func:`perfmodel.train.graph.backward` derives them, each timed standalone with the profile ``perfmodel train --arch
h200`` composes): by the dense GEMM model alone (before), with the grouped efficiency ``perfmodel fit`` takes from
these rows (in-sample), and with the efficiency fitted without the model's own shapes (held out: fitted on the other
two models). Prints the median signed error per pass and rows an expert, and per model.

    python docs/tools/grouped_gemm_check.py [--folder DIR] [--format table|markdown]
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

FOLDER = ROOT / "calibration" / "h200" / "grouped-gemm"
ARCH = "h200-sxm"


def measured_rows(folder: Path) -> list[dict]:
    path = folder / "measurements.jsonl"
    if not path.is_file():  # the measurement is not in the repository until a run on a GPU writes it
        print(f"grouped_gemm_check: error: no measurements at {path} (python -m perfmodel.measure.grouped_gemm on "
              "a GPU writes them; --folder DIR reads another run)", file=sys.stderr)
        raise SystemExit(2)
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("kind") == "grouped_gemm" and r.get("time_s")]


def priced(rows: list[dict]) -> list[float]:
    """Seconds the dense GEMM model gives each measured pass as the training graph builds it (no grouped
    efficiency): forward and data gradient as :func:`perfmodel.train.graph.backward` derives them, the weight
    gradient writing its bf16 product (the measurement's ``torch._grouped_mm`` output) - the training graph also
    reads and writes the fp32 main gradient there (Megatron's gradient-accumulation fusion), which this
    measurement does not run."""
    return [model for _, model, _ in parts(rows)]


def parts(rows: list[dict]) -> list[tuple[float, float, float]]:
    """(measured seconds, dense model seconds, rows an expert) per row (:func:`perfmodel.fit.training.grouped_parts`),
    with the profile ``perfmodel train --arch h200`` composes (engine torch)."""
    from perfmodel.fit.training import grouped_parts
    from perfmodel.resolve import resolve_hardware, resolve_profile
    from perfmodel.train.cost import training_params

    hw = resolve_hardware(ARCH)
    prof = resolve_profile(None, hw, "torch")
    return grouped_parts(rows, hw, prof, training_params(prof))


def compare(folder: Path = FOLDER) -> dict:
    from perfmodel.fit.training import fit_passes, grouped_price

    rows = measured_rows(folder)
    xs = parts(rows)
    passes = [r["params"]["pass"] for r in rows]
    fitted = fit_passes(xs, passes)  # what perfmodel fit takes from these rows (one format: bf16)
    models = sorted({r["params"]["model"] for r in rows})
    held = {m: fit_passes(*zip(*[(x, p) for r, x, p in zip(rows, xs, passes) if r["params"]["model"] != m]))
            for m in models} if len(models) > 1 else {m: fitted for m in models}  # one model: nothing held out
    groups: dict[tuple, list[tuple[float, float, float]]] = {}
    for r, x, ps in zip(rows, xs, passes):
        p = r["params"]
        errs = (x[1] / x[0] - 1.0, grouped_price(x, *fitted[ps]) / x[0] - 1.0,
                grouped_price(x, *held[p["model"]][ps]) / x[0] - 1.0)
        groups.setdefault(("all", "every product", ""), []).append(errs)
        groups.setdefault(("pass", p["pass"], p["rows"]), []).append(errs)
        groups.setdefault(("model", p["model"], p["pass"]), []).append(errs)
    order = {"all": 0, "model": 1, "pass": 2}
    out = {}
    for k, v in sorted(groups.items(), key=lambda kv: (order[kv[0][0]], str(kv[0][1]),
                                                    f"{kv[0][2]:08d}" if isinstance(kv[0][2], int) else str(kv[0][2]))):
        col = list(zip(*v))
        out[k] = {"n": len(v), **{f"{name}_signed": statistics.median(c) for name, c in zip(COLUMNS, col)},
                  **{f"{name}_abs": statistics.median(map(abs, c)) for name, c in zip(COLUMNS, col)}}
    out["fitted"] = {"all": fitted, "held_out": held}
    return out


COLUMNS = ("dense", "fitted", "held")


def table(result: dict, markdown: bool) -> str:
    head = ("by", "what", "pass / rows", "products", "dense GEMM model", "grouped fit (in-sample)", "|error|",
            "held out (other two models)", "|error|")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] if markdown else ["  ".join(f"{h:>16}" for h in head)]
    for key, v in result.items():
        if key == "fitted":
            continue
        by, a, b = key
        what, sub = (a, f"{b} rows an expert") if by == "pass" else (a, b)
        cells = (by, str(what), str(sub), str(v["n"]), f"{v['dense_signed']:+.1%}", f"{v['fitted_signed']:+.1%}",
                 f"{v['fitted_abs']:.1%}", f"{v['held_signed']:+.1%}", f"{v['held_abs']:.1%}")
        lines.append("| " + " | ".join(cells) + " |" if markdown else "  ".join(f"{c:>16}" for c in cells))
    f = result["fitted"]
    lines.append("")
    lines.append("Fitted on every row, per pass (grouped rate over the dense model's, rows each expert pays beyond "
                 "its own): " + "; ".join(f"{p} {e:.3f}, {r0:.1f}" for p, (e, r0) in f["all"].items()) + ".")
    lines.append("Fitted without each model: " + "; ".join(
        f"{m}: " + ", ".join(f"{p} {e:.3f} / {r0:.1f}" for p, (e, r0) in v.items()) for m, v in f["held_out"].items())
        + ".")
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
