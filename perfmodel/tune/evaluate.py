"""The evidence from measured rows (``perfmodel tune evaluate DIR``): does the model's short list hold the
configuration an exhaustive search finds?

Per shape whose valid space was measured completely (every configuration the *current* model considers
valid has a row; failed compiles and wrong results count as measured, never as best):

- hit: one of the model's top-k proposals is within ``tol`` (2%) of the exhaustive best;
- top-1 slowdown: the model's first choice against the best;
- tuning time saved: compile + benchmark seconds of the k proposals against those of the whole space;
- random-k baseline: the chance that k configurations drawn at random hold a within-tol one;
- the best Triton configuration against torch's own kernel (cuBLAS / SDPA).

The model is re-run on the rows with the constants given, so a changed model is judged on the same
measurements. When the folder holds a tune profile fitted on these rows, only the shapes the fit held out
are judged (:func:`evaluate_directory`). Runs on CPU.
"""
from __future__ import annotations

import json
import statistics
from math import comb

from .dataset import ShapeRows, group_shapes, load_measurements
from .rank import proposals, rank_attention, rank_gemm


def ranking_for(entry: ShapeRows, hw, prof, consts=None):
    s = entry.shape
    if entry.kind == "gemm":
        return rank_gemm(hw, prof, s["m"], s["n"], s["k"], s.get("dtype", "bf16"), entry.grid, consts)
    return rank_attention(hw, prof, s["batch"], s["heads_q"], s["heads_kv"], s["seq_q"], s["seq_kv"], s["head_dim"],
                          bool(s["causal"]), s.get("dtype", "bf16"), consts)


def evaluate_shape(entry: ShapeRows, hw, prof, consts=None, *, top: int = 8, tol: float = 0.02) -> dict:
    ranking = ranking_for(entry, hw, prof, consts)
    valid = [p.config.key for p in ranking.ranked]
    measured = entry.rows
    ok = entry.times()
    missing = [k for k in valid if k not in measured]
    item = {"kind": entry.kind, "shape": entry.name, "valid": len(valid), "measured": sum(1 for k in valid if k in measured),
            "succeeded": len(ok), "complete": not missing and bool(ok), "reference_s": entry.reference_s}
    # every configuration that ran is a candidate for the best, also one the current model rules out
    if not ok:
        return item
    best_key = min(ok, key=ok.get)
    best = ok[best_key]
    props = [p.config.key for p in proposals(ranking, top)]
    prop_times = [ok[k] for k in props if k in ok]
    item.update(best_key=best_key, best_s=best, proposals=props, proposals_measured=len(prop_times))
    if prop_times:
        item["top_k_best_s"] = min(prop_times)
        item["top_k_gap"] = min(prop_times) / best - 1.0
        item["hit"] = min(prop_times) <= best * (1.0 + tol)
    if props and props[0] in ok:
        item["top1_key"] = props[0]
        item["top1_s"] = ok[props[0]]
        item["top1_slowdown"] = ok[props[0]] / best - 1.0
        item["top1_predicted_s"] = ranking.ranked[0].time_s
    good = sum(1 for t in ok.values() if t <= best * (1.0 + tol))
    n = len(ok)
    item["random_k_hit_chance"] = 1.0 - comb(n - good, min(top, n)) / comb(n, min(top, n))
    cost = {k: float(measured[k].get("compile_s") or 0.0) + float(measured[k].get("bench_s") or 0.0)
            for k in measured}
    total = sum(cost.values())
    if total > 0:
        item["tuning_s_all"] = total
        item["tuning_s_top_k"] = sum(cost.get(k, 0.0) for k in props)
        item["tuning_time_saved"] = 1.0 - item["tuning_s_top_k"] / total
    if entry.reference_s:
        item["best_vs_torch"] = best / entry.reference_s
    return item


def summarize(shapes: list[dict], top: int, tol: float) -> dict:
    done = [s for s in shapes if s["complete"] and "hit" in s]
    summary = {"top": top, "tolerance": tol, "shapes": len(shapes), "complete_shapes": len(done)}
    if not done:
        return summary
    summary["hits"] = sum(bool(s["hit"]) for s in done)
    summary["hit_rate"] = summary["hits"] / len(done)
    slow = [s["top1_slowdown"] for s in done if "top1_slowdown" in s]
    if slow:
        summary["median_top1_slowdown"] = statistics.median(slow)
        summary["mean_top1_slowdown"] = statistics.mean(slow)
        summary["top1_within_5pct"] = sum(x <= 0.05 for x in slow) / len(slow)
    summary["median_top_k_gap"] = statistics.median(s["top_k_gap"] for s in done)
    summary["worst_top_k_gap"] = max(s["top_k_gap"] for s in done)
    summary["random_k_hit_rate"] = statistics.mean(s["random_k_hit_chance"] for s in done)
    saved = [s["tuning_time_saved"] for s in done if "tuning_time_saved" in s]
    if saved:
        summary["median_tuning_time_saved"] = statistics.median(saved)
        summary["tuning_s_all"] = sum(s["tuning_s_all"] for s in done if "tuning_s_all" in s)
        summary["tuning_s_top_k"] = sum(s["tuning_s_top_k"] for s in done if "tuning_s_top_k" in s)
    for kind in ("gemm", "attention"):
        sel = [s for s in done if s["kind"] == kind]
        if sel:
            summary[f"{kind}_hit_rate"] = sum(s["hit"] for s in sel) / len(sel)
            summary[f"{kind}_complete_shapes"] = len(sel)
    return summary


def evaluate_entries(entries: list[ShapeRows], hw, prof, consts=None, *, top: int = 8, tol: float = 0.02) -> dict:
    shapes = [evaluate_shape(e, hw, prof, consts, top=top, tol=tol) for e in entries]
    return {"summary": summarize(shapes, top, tol), "shapes": shapes}


def evaluate(rows: list[dict], hw, prof, consts=None, *, top: int = 8, tol: float = 0.02) -> dict:
    """Every shape of ``rows`` (a list of measured rows) with the given constants (None: the estimates)."""
    return evaluate_entries(group_shapes(rows), hw, prof, consts, top=top, tol=tol)


def evaluate_directory(directory, hw, prof, *, top: int = 8, tol: float = 0.02, tune_profile=None,
                       estimates: bool = False) -> dict:
    """The evidence for a folder of runs. With a tune profile fitted on these rows (``tune_profile``, or
    ``DIR/tune_profile.json``), the fitted constants judged on the shapes the fit held out, only, plus the
    fit's k-fold figures; without one (or with ``estimates``), the estimates on every shape (none was
    fitted on)."""
    from pathlib import Path

    from .constants import TUNE_PROFILE, default_constants, load_tune_profile

    data = load_measurements(directory)
    tp = tune_profile
    if tp is None and not estimates and Path(directory).is_dir() and (Path(directory) / TUNE_PROFILE).is_file():
        tp = load_tune_profile(directory)
    if tp is None:
        result = evaluate_entries(data.shapes, hw, prof, default_constants(prof), top=top, tol=tol)
        result["scope"] = {"constants": "estimates (no tune profile in this folder)", "judged": "all shapes",
                           "fitted_on": 0}
    else:
        held = set(tp.evidence.get("held_out_shapes", []))
        judged = [e for e in data.shapes if e.key in held]
        result = evaluate_entries(judged, hw, prof, tp.constants, top=top, tol=tol)
        result["scope"] = {"constants": tp.label, "judged": "held-out shapes only",
                           "fitted_on": len(tp.evidence.get("train_shapes", [])), "held_out": len(judged)}
        if "kfold" in tp.evidence:
            result["kfold"] = tp.evidence["kfold"]
    result["files"] = data.files
    return result


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


def evaluation_table(result: dict) -> str:
    s = result["summary"]
    lines = []
    scope = result.get("scope")
    if scope:
        lines.append(f"constants: {scope['constants']}; judged: {scope['judged']}"
                     + (f" ({scope['held_out']} held out, {scope['fitted_on']} fitted on)" if "held_out" in scope
                        else ""))
    lines.append(f"{'kind':<9} {'shape':<32} {'valid':>5} {'meas':>5} {'best':>10} {'top1':>8} {'top-k':>8} "
                 f"{'hit':>4} {'rand':>5} {'saved':>6} {'vs torch':>8}")
    for x in result["shapes"]:
        best = f"{x['best_s'] * 1e6:.1f}us" if "best_s" in x else "-"
        lines.append(f"{x['kind']:<9} {x['shape'][:32]:<32} {x['valid']:>5} {x['measured']:>5} {best:>10} "
                     f"{_pct(x.get('top1_slowdown')):>8} {_pct(x.get('top_k_gap')):>8} "
                     f"{('yes' if x.get('hit') else 'no') if 'hit' in x else '-':>4} "
                     f"{x.get('random_k_hit_chance', 0):>5.0%} "
                     f"{(format(x['tuning_time_saved'], '.0%') if 'tuning_time_saved' in x else '-'):>6} "
                     f"{(format(x['best_vs_torch'], '.2f') + 'x') if 'best_vs_torch' in x else '-':>8}"
                     + ("" if x["complete"] else "  (incomplete)"))
    lines.append("")
    lines.append(summary_line(s))
    kf = result.get("kfold")
    if kf and kf.get("summary", {}).get("complete_shapes"):
        lines.append(f"{kf['folds']}-fold cross-validation (each shape judged by constants fitted without it): "
                     + summary_line(kf["summary"]))
    return "\n".join(lines)


def summary_line(s: dict) -> str:
    if not s.get("complete_shapes"):
        return f"no shape of {s['shapes']} has its whole valid space measured yet"
    return (f"{s['complete_shapes']} of {s['shapes']} shapes measured completely. Model top-{s['top']} within "
            f"{s['tolerance']:.0%} of the exhaustive best: {s['hit_rate']:.0%} of shapes ({s['hits']}/"
            f"{s['complete_shapes']}; random {s['top']}: {s['random_k_hit_rate']:.0%}); median top-1 slowdown "
            f"{s.get('median_top1_slowdown', float('nan')):.1%}; median tuning time saved "
            f"{s.get('median_tuning_time_saved', float('nan')):.0%}.")


def to_json(result: dict) -> str:
    return json.dumps(result, indent=1, allow_nan=False) + "\n"
