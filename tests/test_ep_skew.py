"""docs/validation-silicon.md's reading of the engines' MoE tables under expert parallelism
(docs/tools/ep_skew_table.py): the figures its prose gives are the table's."""
from __future__ import annotations

import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_prose_states_the_tables_range_of_the_busiest_ranks_cost(docs_tool):
    tool = docs_tool("ep_skew_table.py")
    by_band: dict[str, list[float]] = {}
    for folder in tool.FOLDERS:
        r = tool.ratios(folder)
        for _, band in tool.BANDS:
            skew = statistics.median(r[(tool.SKEWED, band)]) / statistics.median(r[("balanced", band)])
            by_band.setdefault(band, []).append(skew)
    big, small = by_band[tool.BANDS[-1][1]], by_band[tool.BANDS[0][1]]
    # the busiest rank under skew costs EP more than TP at every folder's largest steps
    assert min(big) > 1.15
    text = " ".join((ROOT / "docs" / "validation-silicon.md").read_text().split())
    lo, hi = (round((x - 1) * 100) for x in (min(big), max(big)))
    assert f"costs {lo}-{hi}% more against splitting them than under balanced routing" in text
    lo, hi = (round((x - 1) * 100) for x in (min(small), max(small)))
    assert f"{lo}-{hi}% at decode sizes" in text
