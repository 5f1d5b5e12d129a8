"""The held-out table of docs/tables.md, from the ``tables`` section each shipped engine folder's validation file
holds (``perfmodel fit`` or ``python -m perfmodel.fit.tables --write`` writes it).

    python docs/tools/tables_table.py          # well under a second
"""
from __future__ import annotations

import gzip
import json

from perfmodel.paths import repo_root

ENGINES = ("trtllm", "vllm", "sglang")


def _section(folder) -> dict | None:
    for name, opener in (("validation.json.gz", gzip.open), ("validation.json", open)):
        path = folder / name
        if path.is_file():
            with opener(path, "rt", encoding="utf-8") as fh:
                doc = json.load(fh)
            return doc.get("tables") or doc.get("summary", {}).get("tables")
    return None


def tables() -> str:
    from perfmodel.cost.table_store import read_header

    folders = sorted(p for p in (repo_root() / "calibration").iterdir()
                     if p.is_dir() and p.name.rsplit("-", 1)[-1] in ENGINES)
    rows = []
    n = {"classes": 0, "beat": 0, "median": 0, "both": 0, "gemm_missed": 0, "gemm_spread": 0}
    for folder in folders:
        sec = _section(folder)
        if not sec:
            continue
        goal = sec["goal"]
        for cls, c in sec["classes"].items():
            f, i = c["fitted"], c["interpolated"]
            if i["median_abs_error"] is None:
                continue
            a = c.get("adjacent_rows")
            rows.append(f"| {folder.name} | {cls} | {c['n']} | {c['used_by_projections']} | "
                        f"{f['median_abs_error']:.1%} / {f['p90_abs_error']:.1%} | "
                        f"{i['median_abs_error']:.1%} / {i['p90_abs_error']:.1%} | "
                        + ("-" if not a else f"{a['median']:.1%} / {a['p90']:.1%}") + " |")
            if "[" in cls:  # a kernel the engine does not run there: evidence for carrying, not priced
                continue
            n["classes"] += 1
            n["beat"] += i["median_abs_error"] <= f["median_abs_error"]
            med = i["median_abs_error"] <= goal["median_abs_error"]
            both = med and i["p90_abs_error"] <= goal["p90_abs_error"]
            n["median"] += med
            n["both"] += both
            if cls.startswith("gemm") and not both:
                n["gemm_missed"] += 1
                n["gemm_spread"] += bool(a) and a["p90"] > goal["p90_abs_error"]
    whole = [f / "tables.npz" for f in folders if (f / "tables.npz").is_file()]
    stored = sum(sum(c["rows"] for c in read_header(w)["classes"]) for w in whole)
    size = sum(w.stat().st_size for w in whole)
    head = [f"The whole tables: {stored:,} rows in {len(whole)} folders' tables.npz, {size / 1e6:.1f} MB.", "",
            f"Of {n['classes']} classes the engines run, the table beats the fit at the median in {n['beat']}; "
            f"{n['median']} reach 3% median, {n['both']} both 3% median and 10% P90. Of the {n['gemm_missed']} GEMM "
            f"classes that miss either, {n['gemm_spread']} time GEMMs of m and m + 1 rows more than 10% apart in a "
            "tenth of their pairs (P90 of *adjacent rows*): a spread of the table's own that no interpolant of the "
            "other rows recovers.", "",
            "| folder | class | held-out rows | used | fitted median / P90 | interpolated median / P90 "
            "| adjacent rows median / P90 |",
            "|---|---|---|---|---|---|---|"]
    return "\n".join(head + rows)


if __name__ == "__main__":
    print(tables())
