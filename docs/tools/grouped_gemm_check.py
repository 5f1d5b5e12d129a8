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

FOLDERS = (ROOT / "calibration" / "h200" / "grouped-gemm", ROOT / "calibration" / "h200" / "grouped-gemm-h100")
ARCH = "h200-sxm"  # the profile's part; a folder measured on another part is priced with the profile carried there


def measured_rows(folder: Path) -> list[dict]:
    path = folder / "measurements.jsonl"
    if not path.is_file():  # the measurement is not in the repository until a run on a GPU writes it
        print(f"grouped_gemm_check: error: no measurements at {path} (python -m perfmodel.measure.grouped_gemm on "
              "a GPU writes them; --folder DIR reads another run)", file=sys.stderr)
        raise SystemExit(2)
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [r for r in rows if r.get("kind") == "grouped_gemm" and r.get("time_s")]


def source(folder: Path):
    """The folder's rows as a :class:`perfmodel.fit.training.GroupedSource`: priced on the part they were measured
    on (their environment names it; none: the profile's part) with the profile ``perfmodel train --arch h200``
    composes (engine torch: the H200 suite's own fit), carried to that part as ``perfmodel fit`` carries it."""
    from perfmodel.fit.directory import match_spec, read_environment
    from perfmodel.fit.training import GroupedSource
    from perfmodel.resolve import resolve_hardware, resolve_profile
    from perfmodel.transfer import carry

    rows = measured_rows(folder)
    hw = resolve_hardware(ARCH)
    prof = resolve_profile(None, hw, "torch")
    env = read_environment(folder / "environment.json") or next((r["env"] for r in rows if r.get("env")), {})
    part = match_spec(env, None) if env else hw
    return GroupedSource(rows, part, prof if part.key == hw.key else carry(prof, hw, part))


def priced(rows: list[dict]) -> list[float]:
    """Seconds the dense GEMM model gives each measured pass as the training graph builds it (no grouped
    efficiency), on the profile's part: forward and data gradient as :func:`perfmodel.train.graph.backward`
    derives them, the weight gradient writing its bf16 product (the measurement's ``torch._grouped_mm`` output) -
    the training graph also reads and writes the fp32 main gradient there (Megatron's gradient-accumulation
    fusion), which this measurement does not run."""
    from perfmodel.fit.training import GroupedSource, grouped_parts
    from perfmodel.resolve import resolve_hardware, resolve_profile
    from perfmodel.train.cost import training_params

    hw = resolve_hardware(ARCH)
    prof = resolve_profile(None, hw, "torch")
    return [model for _, model, _ in grouped_parts(rows, hw, prof, training_params(prof))]


def compare(folders=FOLDERS) -> dict:
    """The fit ``perfmodel fit`` makes from the folders (:func:`perfmodel.fit.training.fit_grouped`: per format,
    the rows of the profile's part where it measured the format, else another part's; fp8 at fast accumulation)
    and, per format and the part it was fitted on, the median errors of the dense model, the fit (in-sample) and
    the fit held out by model, overall, per model and pass, and per pass and rows an expert; where a format was
    measured on another part too, how the fit prices that part's rows (the carry rule's check); and what the
    measured fp8 products take against bf16's and with the other accumulation."""
    from perfmodel.fit.training import fit_grouped, fit_passes, grouped_parts, grouped_price, grouped_usable
    from perfmodel.train.cost import training_params

    folders = [Path(f) for f in (folders if isinstance(folders, (list, tuple)) else [folders])]
    sources = [source(f) for f in folders if (f / "measurements.jsonl").is_file() or f == folders[0]]
    own = [s for s in sources if s.hw.key == sources[0].hw.key]
    others = tuple(s for s in sources if s.hw.key != sources[0].hw.key)
    entries, summary = fit_grouped([r for s in own for r in s.rows], own[0].hw, own[0].prof, elsewhere=others)
    # priced as projections price: the composed profile's parameters (``perfmodel fit`` fitted them against the
    # folder's own profile, whose fp8 tile constants and memory figures composition may take from other evidence:
    # the refit here differs from them by under 1%), a format the profile lacks by this refit
    committed = own[0].prof.training or {}
    eta = {**entries.get("grouped_gemm_eta", {}), **committed.get("grouped_gemm_eta", {})}
    rows0 = {**entries.get("grouped_gemm_rows0", {}), **committed.get("grouped_gemm_rows0", {})}
    groups: dict[tuple, list[tuple[float, float, float]]] = {}
    checks: dict[tuple, list[tuple[float, float]]] = {}
    for src in (*own, *others):
        use = grouped_usable(src.rows)
        xs = grouped_parts(use, src.hw, src.prof, training_params(src.prof))
        for fmt in sorted({r["params"].get("dtype", "bf16") for r in use}):
            sub = [(r, x) for r, x in zip(use, xs) if r["params"].get("dtype", "bf16") == fmt]
            fitted = {p: (eta[f"{fmt}.{p}"], rows0[f"{fmt}.{p}"]) for p in {r["params"]["pass"] for r, _ in sub}}
            where = summary[fmt]["part"]
            if src.hw.key != where:  # a part the format was not fitted on: how the carried fit prices it
                for r, x in sub:
                    checks.setdefault((fmt, src.hw.key), []).append(
                        (x[1] / x[0] - 1.0, grouped_price(x, *fitted[r["params"]["pass"]]) / x[0] - 1.0))
                continue
            models = sorted({r["params"]["model"] for r, _ in sub})
            held = {m: fit_passes(*zip(*[(x, r["params"]["pass"]) for r, x in sub if r["params"]["model"] != m]))
                    for m in models} if len(models) > 1 else {m: fitted for m in models}  # one model: none held out
            for r, x in sub:
                p = r["params"]
                errs = (x[1] / x[0] - 1.0, grouped_price(x, *fitted[p["pass"]]) / x[0] - 1.0,
                        grouped_price(x, *held[p["model"]][p["pass"]]) / x[0] - 1.0)
                groups.setdefault(("all", fmt, "every product", ""), []).append(errs)
                groups.setdefault(("pass", fmt, p["pass"], p["rows"]), []).append(errs)
                groups.setdefault(("model", fmt, p["model"], p["pass"]), []).append(errs)
    order = {"all": 0, "model": 1, "pass": 2}
    out = {}
    for k, v in sorted(groups.items(), key=lambda kv: (kv[0][1], order[kv[0][0]], str(kv[0][2]),
                                                    f"{kv[0][3]:08d}" if isinstance(kv[0][3], int) else str(kv[0][3]))):
        col = list(zip(*v))
        out[k] = {"n": len(v), **{f"{name}_signed": statistics.median(c) for name, c in zip(COLUMNS, col)},
                  **{f"{name}_abs": statistics.median(map(abs, c)) for name, c in zip(COLUMNS, col)}}
    out["fitted"] = {fmt: {"measured_on": g["measured_on"],
                           "parameters": {p: {"eta": eta[f"{fmt}.{p}"], "rows0": rows0[f"{fmt}.{p}"]}
                                          for p in g["fitted_parameters"]},
                           "held_out": {m: h["fitted"] for m, h in g["held_out_by_model"].items()}}
                     for fmt, g in summary.items()}
    out["carried"] = {k: {"n": len(v), "dense_signed": statistics.median(a for a, _ in v),
                          "carried_signed": statistics.median(b for _, b in v),
                          "carried_abs": statistics.median(abs(b) for _, b in v)} for k, v in checks.items()}
    out["ratios"] = {src.hw.key: measured_ratios(src.rows) for src in sources if measured_ratios(src.rows)}
    return out


def measured_ratios(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per pass, the median over the shapes measured both ways of fp8's time over bf16's (fp8 at the recipe's
    accumulation) and of split accumulation's time over fast accumulation's: measured, no model."""
    from perfmodel.train.graph import FP8_FAST_ACCUMULATION

    def shape(p: dict) -> tuple:
        return tuple(p[k] for k in ("model", "product", "pass", "experts", "rows"))

    bf16 = {shape(r["params"]): r["time_s"] for r in rows if r["params"].get("dtype", "bf16") == "bf16"}
    fp8 = {(shape(r["params"]), bool(r["params"]["fast_accum"])): r["time_s"] for r in rows
           if r["params"].get("dtype") == "fp8"}
    out: dict[str, dict[str, float]] = {}
    for (key, fast), t in fp8.items():
        pass_ = key[2]
        if fast == FP8_FAST_ACCUMULATION[pass_] and key in bf16:
            out.setdefault("fp8_over_bf16", {}).setdefault(pass_, []).append(t / bf16[key])
        if fast and (key, False) in fp8:
            out.setdefault("split_over_fast", {}).setdefault(pass_, []).append(fp8[(key, False)] / t)
    return {what: {p: statistics.median(v) for p, v in sorted(by.items())} for what, by in out.items()}


COLUMNS = ("dense", "fitted", "held")


def table(result: dict, markdown: bool) -> str:
    head = ("by", "format", "what", "pass / rows", "products", "dense GEMM model", "grouped fit (in-sample)",
            "|error|", "held out (other two models)", "|error|")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] if markdown else ["  ".join(f"{h:>16}" for h in head)]
    for key, v in result.items():
        if not isinstance(key, tuple):
            continue
        by, fmt, a, b = key
        what, sub = (a, f"{b} rows an expert") if by == "pass" else (a, b)
        cells = (by, fmt, str(what), str(sub), str(v["n"]), f"{v['dense_signed']:+.1%}", f"{v['fitted_signed']:+.1%}",
                 f"{v['fitted_abs']:.1%}", f"{v['held_signed']:+.1%}", f"{v['held_abs']:.1%}")
        lines.append("| " + " | ".join(cells) + " |" if markdown else "  ".join(f"{c:>16}" for c in cells))
    lines.append("")
    for fmt, f in result["fitted"].items():
        lines.append(f"{fmt}, measured on the {f['measured_on']}, the profile's parameters per pass (grouped rate "
                     "over the dense model's, rows each expert pays beyond its own): "
                     + "; ".join(f"{p} {v['eta']:.3f}, {v['rows0']:.1f}" for p, v in f["parameters"].items()) + ".")
        lines.append(f"Fitted without each model ({fmt}): " + "; ".join(
            f"{m}: " + ", ".join(f"{p} {v['eta']:.3f} / {v['rows0']:.1f}" for p, v in h.items())
            for m, h in f["held_out"].items()) + ".")
    for (fmt, part), v in result["carried"].items():
        lines.append(f"The {fmt} fit carried to the {part} (the transfer rule) on its {v['n']} {fmt} rows: "
                     f"{v['carried_signed']:+.1%} signed, {v['carried_abs']:.1%} |error| at the median "
                     f"(the dense model alone {v['dense_signed']:+.1%}).")
    words = {"fp8_over_bf16": "fp8 time over bf16 time, the same product (fp8 at the recipe's accumulation)",
             "split_over_fast": "fp8 split accumulation's time over fast accumulation's"}
    for part, ratios in result["ratios"].items():
        for what, by in ratios.items():
            lines.append(f"Measured on the {part}, median per pass, {words[what]}: "
                         + ", ".join(f"{p} {r:.3f}" for p, r in by.items()) + ".")
    return "\n".join(lines)


def markdown() -> str:
    return table(compare(FOLDERS), True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folder", type=Path, action="append",
                    help="a measurement folder (repeatable; default: the H200's and the H100's beside it)")
    ap.add_argument("--format", choices=("table", "markdown"), default="table")
    args = ap.parse_args(argv)
    print(table(compare(args.folder or FOLDERS), args.format == "markdown"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
