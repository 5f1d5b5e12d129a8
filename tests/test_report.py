"""The HTML report: renders in a real browser with every chart drawn, escapes user-supplied names, and
references nothing outside the file.

The browser test needs Debian's chromium (``apt-get install -y chromium``, at /usr/bin/chromium) and
playwright's Python package (``pip install playwright``; no ``playwright install``: it drives the system
chromium). It is skipped with the reason when either is missing. Set PERFMODEL_UPDATE_EXAMPLES=1 to
refresh docs/examples/report-first-screen.png from it.
"""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from perfmodel.scenario import Scenario

CHROMIUM = os.environ.get("PERFMODEL_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
ROOT = Path(__file__).resolve().parent.parent


def _render(tmp_path, arch=("b200",), baseline="h100-sxm", model="llama70b", **sc):
    from perfmodel.outputs.report import render_report

    scenario = Scenario(**{"tp": 2, **sc}).validated()
    html = render_report(list(arch), model, scenario, baseline=baseline, calibration=None,
                         argv=["report", "--arch", *arch, "--model", model])
    out = tmp_path / "report.html"
    out.write_text(html, encoding="utf-8")
    return out, html


def _expected_charts(n_parts: int) -> dict[str, int]:
    """data-chart name -> the fewest marks it must have."""
    want = {"latency-prefill": 2 * n_parts, "latency-decode": 2 * n_parts, "throughput-latency": 4 * n_parts,
            "memory": 2 * n_parts}
    for i in range(n_parts):
        want[f"roofline-{i}"] = 8
        want[f"tornado-throughput-{i}"] = 2
        want[f"tornado-tpot-{i}"] = 2
    return want


def test_report_is_self_contained(tmp_path):
    _, html = _render(tmp_path)
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", html, re.I)
    assert "@import" not in html
    # the only URL-looking text allowed is the SVG namespace, which loads nothing
    urls = set(re.findall(r"https?://[^\s\"'<>]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}, urls
    for sect in ("summary", "hardware", "latency", "roofline", "curve", "memory", "sensitivity", "provenance"):
        assert f'id="{sect}"' in html
    for name in _expected_charts(2):
        assert f'data-chart="{name}"' in html
    assert "@media print" in html


def test_report_content(tmp_path):
    _, html = _render(tmp_path, arch=("b200", "h200-sxm"), batch="max")
    # headline per part, with bands and a reason, and the speed-up against the baseline
    assert html.count('class="card"') == 3
    assert html.count("P10&ndash;P90") >= 9
    assert "bound; top operator" in html
    assert "baseline" in html
    # hardware side by side with source tags
    assert 'class="src src-datasheet"' in html and 'class="src src-derived"' in html
    # sensitivity says what moves nothing
    assert "Move nothing in this scenario" in html
    assert "HBM capacity" in html
    # provenance: spec sha256s, calibration, assumptions, command line
    from perfmodel.outputs.common import file_sha256
    from perfmodel.spec import load_spec

    for f in load_spec("b200").files:
        assert file_sha256(f) in html
    assert "Calibration" in html and "Assumptions" in html
    assert "perfmodel report --arch b200 h200-sxm --model llama70b" in html


def test_script_in_a_spec_name_comes_out_as_text(tmp_path):
    from perfmodel.paths import hardware_dir

    evil = "<script>alert(1)</script>"
    spec = tmp_path / "evil.yaml"
    spec.write_text(f"extends: {hardware_dir() / 'h100-sxm.yaml'}\nname: \"{evil}\"\n", encoding="utf-8")
    out, html = _render(tmp_path, arch=(str(spec),), baseline="b200")
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    # in SVG text too (chart labels and tooltips)
    svg_text = "".join(re.findall(r"<svg.*?</svg>", html, re.S))
    assert "&lt;script&gt;" in svg_text and "<script>" not in svg_text


def _playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright)")
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install -y chromium)")
    return sync_playwright


@pytest.mark.slow
def test_report_renders_in_a_real_browser(tmp_path):
    sync_playwright = _playwright()
    path, _ = _render(tmp_path)
    want = _expected_charts(2)
    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for viewport in ({"width": 1366, "height": 768}, {"width": 820, "height": 1180}):
                page = browser.new_page(viewport=viewport)
                page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                        if m.type in ("error", "warning") else None)
                page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
                page.on("request", lambda r: problems.append(f"request: {r.url}")
                        if not r.url.startswith(("file:", "data:", "about:")) else None)
                page.goto(path.as_uri())
                page.wait_for_load_state("load")
                charts = page.evaluate("""() => [...document.querySelectorAll('svg.chart')].map(s => {
                    const r = s.getBoundingClientRect();
                    const marks = [...s.querySelectorAll('.mark')];
                    const drawn = marks.filter(m => { const b = m.getBoundingClientRect();
                                                      return b.width > 0 || b.height > 0; }).length;
                    return {name: s.dataset.chart, w: r.width, h: r.height, marks: marks.length, drawn};
                })""")
                got = {c["name"]: c for c in charts}
                for name, least in want.items():
                    assert name in got, f"chart {name} missing"
                    c = got[name]
                    assert c["w"] > 100 and c["h"] > 80, c
                    assert c["drawn"] >= least, c
                # no text overflows the page horizontally on a laptop or a tablet screen
                overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
                assert overflow <= 1, overflow
                if viewport["width"] == 1366:
                    shot = tmp_path / "report-first-screen.png"
                    page.screenshot(path=str(shot))
                    assert shot.stat().st_size > 10_000
                    if os.environ.get("PERFMODEL_UPDATE_EXAMPLES") == "1":
                        dest = ROOT / "docs" / "examples" / "report-first-screen.png"
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copyfile(shot, dest)
                    pdf = page.pdf(format="A4")  # print CSS lays out
                    assert len(pdf) > 20_000
                page.close()
        finally:
            browser.close()
    assert not problems, problems


def test_report_cli(tmp_path, capsys):
    from perfmodel.cli import main

    out = tmp_path / "r.html"
    assert main(["report", "--arch", "b200", "--baseline", "h100-sxm", "--model", "llama70b", "--tp", "2",
                 "--out", str(out)]) == 0
    html = out.read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>") and "NVIDIA B200" in html
    capsys.readouterr()
    assert main(["report", "--arch", "nosuchpart", "--model", "llama70b", "--out", str(out)]) == 2
    assert "\n" not in capsys.readouterr().err.strip()


def test_cli_start_does_not_import_heavy_modules():
    import subprocess
    import sys

    code = ("import sys, perfmodel.cli as c; c.build_parser(); "
            "bad = [m for m in ('jinja2', 'openpyxl', 'matplotlib', 'numpy') if m in sys.modules]; print(bad)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout
