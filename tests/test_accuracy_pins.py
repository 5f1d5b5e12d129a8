"""Today's accuracy, pinned per part and class (docs/tools/accuracy_pins.py writes tests/data/accuracy_pins.json):
a median |error| may not grow by more than a point, a signed median not move by more than two."""
from __future__ import annotations

import importlib.util
import json

import pytest

from perfmodel.paths import repo_root

ROOT = repo_root()
PINS = json.loads((ROOT / "tests" / "data" / "accuracy_pins.json").read_text())
MEDIAN_SLACK = 0.01
SIGNED_SLACK = 0.02


def _tool():
    spec = importlib.util.spec_from_file_location("accuracy_pins", ROOT / "docs" / "tools" / "accuracy_pins.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(name: str, now: dict) -> None:
    pinned = PINS[name]
    assert set(now) == set(pinned), (name, sorted(set(now) ^ set(pinned)))
    bad = []
    for key, p in pinned.items():
        x = now[key]
        if x["n"] != p["n"] or x["median_abs_error"] > p["median_abs_error"] + MEDIAN_SLACK \
                or abs(x["signed_median"] - p["signed_median"]) > SIGNED_SLACK:
            bad.append((key, p, x))
    assert not bad, f"{name}: moved past its pin (rerun docs/tools/accuracy_pins.py if intended): {bad}"


@pytest.mark.parametrize("name", ["public", "kernels"])
def test_fast_pins(name):
    _check(name, _tool().FAST[name]())


@pytest.mark.slow
def test_silicon_pins():
    """The silicon table (about ten minutes); the blind backtest's pins are checked in test_accuracy_pins_blind.py."""
    _check("silicon", _tool().SLOW["silicon"]())


def test_documented_carry_spread_is_the_committed_backtests():
    spread = json.loads((ROOT / "calibration" / "backtest.json").read_text())["spread"]["carry_spread"]
    assert f"**{spread:.2f}** in log terms" in (ROOT / "docs" / "backtest.md").read_text()
    assert f"spread ({spread:.2f} in log terms)" in (ROOT / "README.md").read_text()


def test_silicon_doc_states_the_pinned_figures():
    """docs/validation-silicon.md's latest table prints the pinned silicon figures (TPOT and TTFT by part)."""
    doc = (ROOT / "docs" / "validation-silicon.md").read_text()
    names = {"b200": "B200", "b300": "B300", "gb200": "GB200", "gb300": "GB300", "h100-sxm": "H100 SXM",
             "h200-sxm": "H200 SXM"}
    for part, name in names.items():
        cells = []
        for metric in ("tpot", "ttft"):
            x = PINS["silicon"][f"{part} {metric}"]
            cells.append(f"{x['median_abs_error']:.1%} ({x['signed_median']:+.1%})")
        latest = doc.split("## Results")[1].split("\n**After ")[1].split("\n\n**")[0]  # the newest section first
        assert f"| {cells[0]} | {cells[1]} |" in latest, name
    for layout in ("tp", "attention-dp", "disaggregated"):  # and by the layout's class
        cells = [f"{x['median_abs_error']:.1%} ({x['signed_median']:+.1%})"
                 for x in (PINS["silicon"][f"layout {layout} {m}"] for m in ("tpot", "ttft"))]
        assert f"| {cells[0]} | {cells[1]} |" in latest, layout
    for arch, name in (("moe", "mixture of experts"), ("dense", "dense")):  # and by architecture, with the count
        x = [PINS["silicon"][f"architecture {arch} {m}"] for m in ("tpot", "ttft")]
        cells = [f"{v['median_abs_error']:.1%} ({v['signed_median']:+.1%})" for v in x]
        row = next(line for line in latest.splitlines() if line.startswith(f"| {name} |"))
        assert row.endswith(f"| {cells[0]} | {cells[1]} |") and f"| {x[0]['n']:,} |" in row, arch


def test_readme_states_the_silicon_tables_measurements_and_the_pinned_projected_count():
    table = (ROOT / "workloads" / "validation" / "aiconfigurator_silicon.csv").read_text().splitlines()
    measurements = sum(1 for line in table[1:] if ",ttft," in line)  # a measurement's two rows: ttft and tpot
    projected = sum(v["n"] for k, v in PINS["silicon"].items() if k.startswith("layout ") and k.endswith(" tpot"))
    text = " ".join((ROOT / "README.md").read_text().split())
    assert f"{measurements:,} measurements, {projected:,} of them projected" in text


def test_silicon_doc_states_todays_coverage():
    rows = len((ROOT / "workloads" / "validation" / "aiconfigurator_silicon.csv").read_text().splitlines()) - 1
    projected = sum(v["n"] for k, v in PINS["silicon"].items() if k.startswith("layout ") and k.endswith(" tpot"))
    doc = " ".join((ROOT / "docs" / "validation-silicon.md").read_text().split())
    assert f"{2 * projected:,} of the table's {rows:,} rows are projected ({projected:,} measurements" in doc


def test_readme_states_the_pinned_attention_dp_figures():
    """README.md's "Not yet" gives the attention-DP rows' signed medians as the silicon pins have them."""
    tpot, ttft = (-PINS["silicon"][f"layout attention-dp {m}"]["signed_median"] for m in ("tpot", "ttft"))
    text = " ".join((ROOT / "README.md").read_text().split())
    assert f"TPOT by {tpot:.1%} and TTFT by {ttft:.1%} at the signed median" in text
