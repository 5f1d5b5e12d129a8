"""The evidence from measured rows (``perfmodel tune evaluate DIR``): does the model's short list hold the
configuration an exhaustive search finds?

Per shape whose valid space was measured completely (every configuration the *current* model considers
valid has a row; failed compiles and wrong results count as measured, never as best):

- hit: one of the model's top-k proposals is within ``tol`` (2%) of the exhaustive best;
- top-1 slowdown: the model's first choice against the best;
- tuning time saved: compile + benchmark seconds of the k proposals against those of the whole space;
- random-k baseline: the chance that k configurations drawn at random hold a within-tol one;
- the best Triton configuration against torch's own kernel (cuBLAS / SDPA).

The model is re-run on the rows, so a changed model is judged on the same measurements. Runs on CPU.
"""
from __future__ import annotations

import json
import statistics
from math import comb
from pathlib import Path

from ..errors import InputError
from .measure import ROWS
from .rank import proposals, rank_attention, rank_gemm


def load_rows(directory) -> list[dict]:
    from ..calibrate.store import iter_rows

    d = Path(directory)
    path = d / ROWS if d.is_dir() else d
    if not path.is_file():
        raise InputError(f"no {ROWS} here (run `python -m perfmodel.tune.measure --out DIR` on a GPU first)",
                         file=str(directory))
    return list(iter_rows(path))


def _ranking(kind: str, shape: dict, hw, prof, grid: str = "full"):
    if kind == "gemm":
        return rank_gemm(hw, prof, shape["m"], shape["n"], shape["k"], shape.get("dtype", "bf16"), grid)
    return rank_attention(hw, prof, shape["batch"], shape["heads_q"], shape["heads_kv"], shape["seq_q"],
                          shape["seq_kv"], shape["head_dim"], bool(shape["causal"]), shape.get("dtype", "bf16"))


def evaluate(rows: list[dict], hw, prof, *, top: int = 8, tol: float = 0.02) -> dict:
    by_shape: dict[tuple, dict] = {}
    for r in rows:
        if r.get("kind") not in ("gemm", "attention"):
            continue
        key = (r["kind"], r["shape_name"])
        # rows of the first H200 run (2026-12-02) carry no "grid": its GEMMs were measured on the reduced grid
        default_grid = "reduced" if r["kind"] == "gemm" else "full"
        entry = by_shape.setdefault(key, {"shape": r["shape"], "rows": {}, "reference": None,
                                          "grid": r.get("grid", default_grid)})
        if r.get("key") == "torch":
            if r.get("time_s") and not r.get("error"):
                entry["reference"] = float(r["time_s"])
            continue
        entry["rows"][r["key"]] = r
    shapes = []
    for (kind, name), entry in by_shape.items():
        ranking = _ranking(kind, entry["shape"], hw, prof, entry["grid"])
        valid = [p.config.key for p in ranking.ranked]
        measured = entry["rows"]
        ok = {k: float(r["time_s"]) for k, r in measured.items() if r.get("time_s") and not r.get("error")}
        missing = [k for k in valid if k not in measured]
        item = {"kind": kind, "shape": name, "valid": len(valid), "measured": sum(1 for k in valid if k in measured),
                "succeeded": len(ok), "complete": not missing and bool(ok), "reference_s": entry["reference"]}
        if ok:
            best_key = min(ok, key=ok.get)
            best = ok[best_key]
            props = [p.config.key for p in proposals(ranking, top)]
            prop_times = [ok[k] for k in props if k in ok]
            item.update(best_key=best_key, best_s=best, proposals=props,
                        proposals_measured=len(prop_times))
            if prop_times:
                item["top_k_best_s"] = min(prop_times)
                item["top_k_gap"] = min(prop_times) / best - 1.0
                item["hit"] = min(prop_times) <= best * (1.0 + tol)
            if props and props[0] in ok:
                item["top1_s"] = ok[props[0]]
                item["top1_slowdown"] = ok[props[0]] / best - 1.0
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
            if entry["reference"]:
                item["best_vs_torch"] = best / entry["reference"]
        shapes.append(item)
    done = [s for s in shapes if s["complete"] and "hit" in s]
    summary = {"top": top, "tolerance": tol, "shapes": len(shapes), "complete_shapes": len(done)}
    if done:
        summary["hit_rate"] = sum(s["hit"] for s in done) / len(done)
        slow = [s["top1_slowdown"] for s in done if "top1_slowdown" in s]
        if slow:
            summary["median_top1_slowdown"] = statistics.median(slow)
        summary["median_top_k_gap"] = statistics.median(s["top_k_gap"] for s in done)
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
    return {"summary": summary, "shapes": shapes}


def _pct(x) -> str:
    return "-" if x is None else f"{x:+.1%}"


def evaluation_table(result: dict) -> str:
    s = result["summary"]
    lines = [f"{'kind':<9} {'shape':<32} {'valid':>5} {'meas':>5} {'best':>10} {'top1':>8} {'top-k':>8} "
             f"{'hit':>4} {'rand':>5} {'saved':>6} {'vs torch':>8}"]
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
    if s["complete_shapes"]:
        lines.append(f"{s['complete_shapes']} of {s['shapes']} shapes measured completely. Model top-{s['top']} within "
                     f"{s['tolerance']:.0%} of the exhaustive best: {s['hit_rate']:.0%} of shapes (random "
                     f"{s['top']}: {s['random_k_hit_rate']:.0%}); median top-1 slowdown "
                     f"{s.get('median_top1_slowdown', float('nan')):.1%}; median tuning time saved "
                     f"{s.get('median_tuning_time_saved', float('nan')):.0%}.")
    else:
        lines.append(f"no shape of {s['shapes']} has its whole valid space measured yet")
    return "\n".join(lines)


def evaluate_directory(directory, hw, prof, *, top: int = 8, tol: float = 0.02) -> dict:
    return evaluate(load_rows(directory), hw, prof, top=top, tol=tol)


def to_json(result: dict) -> str:
    return json.dumps(result, indent=1) + "\n"
