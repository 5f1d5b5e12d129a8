"""Cross-generation backtest at kernel level: a profile measured on one part predicts another part's measured
kernels through the transfer rules (``perfmodel backtest``).

The source profile (``calibration/h200`` or ``calibration/h200-sxm-trtllm``) is carried to the target's spec by
:func:`perfmodel.transfer.carry` and times every row of the target's folder (imported engine tables: GEMMs per
format, attention per phase and KV format, MoE modules, quantize kernels, NCCL collectives). Nothing of the target
is fitted: the error per class is what a projection for a part nobody measured would carry. Beside it, the
target's own profile on its held-out rows: what measuring the part adds.

Classes: ``gemm <format>``, ``attention <phase> kv <format>``, ``moe <format>``, ``quantize``, and collectives
``<op> x<world> <size class>`` (NCCL, by per-rank message size).
"""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np

from .errors import InputError
from .transfer import SUMMARY  # noqa: F401  (the committed summary's file name; the CLI writes it)


def folder_rows(folder: Path) -> list[dict]:
    from .measure.store import MEASUREMENTS, read_rows

    for name in (MEASUREMENTS, MEASUREMENTS + ".gz"):
        if (folder / name).is_file():
            return read_rows(folder / name)
    raise InputError("no measurements here (measurements.jsonl or .jsonl.gz)", file=str(folder))


def case_class(c) -> str:
    from .cost.gemm import gemm_format

    p = c.params
    if c.kind == "gemm":
        return f"gemm {gemm_format(p['dtype'], p.get('scaling'))}"
    if c.kind == "attention":
        phase = "decode" if p["seq_q"] <= 1 else "prefill"
        kv = p.get("kv_dtype") or p.get("dtype", "bf16")
        fp8 = " fp8-compute" if p.get("dtype") == "fp8" else ""
        return f"attention {phase} kv {kv}{fp8}"
    if c.kind == "moe":
        dist = p.get("distribution", "balanced")
        return f"moe {gemm_format(p['dtype'], p.get('scaling'), p.get('weights'))}" + ("" if dist == "balanced" else f" ({dist})")
    return c.kind


def _size_class(nbytes: float) -> str:
    from .fit.collectives import COMM_SIZE_CLASSES

    for lo, hi, name in COMM_SIZE_CLASSES:
        if lo < nbytes <= hi:
            return name.split(" ")[0]
    return "?"


def _stats(errors: list[float]) -> dict:
    a = np.abs(errors)
    return {"n": len(errors), "median_abs_error": float(np.median(a)), "signed_median": float(np.median(errors)),
            "p90_abs_error": float(np.percentile(a, 90))}


def predict_folder(folder: Path, prof, hw, *, held_out_only: bool = False) -> dict[str, list[float]]:
    """Errors (predicted / measured - 1) of ``prof`` on the folder's rows, by class."""
    from .fit.collectives import comm_rows
    from .fit.latency import load_cases, predict_cases
    from .cost.comm import collective_time

    rows = folder_rows(folder)
    cases, _, _, _ = load_cases(rows, 0.25, 0)
    if held_out_only:
        cases = [c for c in cases if c.held_out]
    out: dict[str, list[float]] = {}
    if cases:
        pred = predict_cases(cases, hw, prof)
        for c, p in zip(cases, pred):
            out.setdefault(case_class(c), []).append(float(p / c.time_s - 1.0))
    # NCCL's own rows are timed by NCCL's fits alone (the projection's all-reduce may take the engine's kernels)
    nccl_only = prof.with_(comm_alpha_s={k: v for k, v in prof.comm_alpha_s.items() if not k.startswith("engine_")},
                           comm_eta={k: v for k, v in prof.comm_eta.items() if not k.startswith("engine_")})
    for r in comm_rows(rows):
        q = r["params"]
        if q.get("backend") != "nccl":
            continue
        w = int(q["world_size"])
        full = float(q["bytes"]) * (w if q["op"] == "all_gather" else 1)  # NCCL's buffer convention
        t = float(collective_time(q["op"], full, w, w, hw, nccl_only))
        out.setdefault(f"{q['op']} x{w} {_size_class(float(q['bytes']))}", []).append(t / float(r["time_s"]) - 1.0)
    return out


def backtest(source: str | Path, target: str | Path) -> dict:
    """The carried source profile and the target's own on the target's rows (module doc)."""
    from .fit.directory import match_spec, read_environment
    from .profile import load_profile
    from .resolve import source_spec
    from .transfer import carry

    src_dir, tgt_dir = Path(source), Path(target)
    src = load_profile(src_dir)
    env = read_environment(tgt_dir / "environment.json")
    hw = match_spec(env, None)
    result = {"source": src.name, "source_part": src.spec_key, "source_engine": src.engine, "target": tgt_dir.name,
              "target_part": hw.key, "classes": {}}
    errs = {"datasheet": predict_folder(tgt_dir, carry(src, source_spec(src), hw, sustained=False), hw),
            "sustained": predict_folder(tgt_dir, carry(src, source_spec(src), hw, sustained=True), hw)}
    if (tgt_dir / "profile.json").is_file():
        errs["own"] = predict_folder(tgt_dir, load_profile(tgt_dir), hw, held_out_only=True)
    for cls in sorted(set().union(*errs.values())):
        result["classes"][cls] = {k: (_stats(e[cls]) if cls in e else None) for k, e in errs.items()}
    return result


SIDES = ("datasheet", "sustained", "own")
# "datasheet" is the blind carry: nothing of the target's own tables is read (its spec's datasheet figures only).
# "sustained" reads the target's sustained ceilings, which `perfmodel sustained` measured from the target's own
# tables: not blind, shown beside it to say what those ceilings buy.
SIDE_TITLES = {"datasheet": "carried blind (datasheet rule)",
               "sustained": "carried, target's sustained ceilings (not blind)", "own": "own profile (held out)"}
BLIND_SIDE = "datasheet"


def markdown(results: list[dict], *, families_only: bool = False) -> str:
    """Per target: each class's median |error| (signed median) under the datasheet-only carry, the carry
    relative to sustained ceilings, and the target's own profile on its held-out rows."""
    lines = []
    for r in results:
        lines += [f"### {r['source']} ({r['source_part']}, {r['source_engine']}) -> {r['target']} ({r['target_part']})",
                  ""]
        head = "| class | rows | " + " | ".join(SIDE_TITLES[s] for s in SIDES) + " |"
        lines += [head, "|---|---|" + "---|" * len(SIDES)]
        rows = summary_by_family(r) if families_only else r["classes"]
        for cls, v in rows.items():
            n = next((x["n"] for x in v.values() if x), 0)
            cells = [f"{x['median_abs_error']:.1%} ({x['signed_median']:+.1%})" if x else "-"
                     for x in (v.get(s) for s in SIDES)]
            lines.append(f"| {cls} | {n} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def family_of(cls: str) -> str:
    head = cls.split()[0]
    if head in ("gemm", "moe"):
        return " ".join(cls.split()[:2]) if "(" not in cls else cls.split(" (")[0] + " (skewed routing)"
    if head == "attention":
        return " ".join(cls.split()[:2])
    if head == "quantize":
        return head
    return "collectives " + cls.split()[-1]  # by size class


def summary_by_family(result: dict) -> dict:
    """Classes pooled into families (GEMM per format, attention per phase, MoE per format, collectives per size
    class): the median of the pooled rows' medians weighted by rows, per side."""
    pooled: dict[str, dict[str, list[tuple[dict, int]]]] = {}
    for cls, v in result["classes"].items():
        fam = family_of(cls)
        for side, x in v.items():
            if x:
                pooled.setdefault(fam, {}).setdefault(side, []).append(x)
    out = {}
    for fam, sides in sorted(pooled.items()):
        out[fam] = {}
        for side, xs in sides.items():
            out[fam][side] = {"n": sum(x["n"] for x in xs),
                              "median_abs_error": _weighted_median(xs, "median_abs_error"),
                              "signed_median": _weighted_median(xs, "signed_median"),
                              "p90_abs_error": max(x["p90_abs_error"] for x in xs)}
    return out


def _weighted_median(classes: list[dict], key: str) -> float:
    """The median of the classes' ``key`` with each class weighted by its rows (``n``)."""
    n = sum(x["n"] for x in classes)
    acc = 0
    for x in sorted(classes, key=lambda x: x[key]):
        acc += x["n"]
        if acc >= n / 2:
            return x[key]
    return max(x[key] for x in classes)


def finite(x: float) -> bool:
    return isinstance(x, float) and math.isfinite(x)


# --- the committed summary: the carry's spread, for the uncertainty bands of carried projections ----------



def log_spread(results: list[dict], side: str = BLIND_SIDE) -> dict:
    """Per family, the 80th percentile over every class of every target (weighted by rows) of the class's median
    |log(carried / measured)|, and the median over families: what a carried profile's band adds (Profile.
    carry_spread, read as the log-spread at P90). From the blind carry by default: a projection of a part
    nobody measured has no tables of its own to read ceilings from."""
    per_family: dict[str, list[tuple[float, int]]] = {}
    for r in results:
        for cls, v in r["classes"].items():
            x = v.get(side)
            if not x or "(" in cls:  # skewed routing rows: an input the model does not take yet
                continue
            fam = family_of(cls).split()[0]
            per_family.setdefault(fam, []).append((math.log1p(x["median_abs_error"]), x["n"]))
    spreads = {}
    for fam, xs in per_family.items():
        xs.sort()
        total = sum(n for _, n in xs)
        acc = 0
        for value, n in xs:  # weighted 80th percentile of the classes' spreads
            acc += n
            if acc >= 0.8 * total:
                spreads[fam] = value
                break
    return {"families": spreads, "carry_spread": statistics.median(spreads.values()) if spreads else None}


def write_summary(results: list[dict], path: Path) -> dict:
    from .io import write_text_atomic
    import json

    doc = {"spread": log_spread(results), "runs": [
        {"source": r["source"], "target": r["target"], "families": summary_by_family(r)} for r in results]}
    write_text_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return doc
