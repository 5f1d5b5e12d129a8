"""Regenerate the example outputs: ``python -m perfmodel.outputs.examples --out DIR`` (the shipped ones are
``--out docs/examples``: a tracked folder, written only when named).

B200 against H100 on Llama-3.1-70B (TP 2, fp8, 2048 in / 512 out, batch 64): the HTML report, the
what-if workbooks (one per part), a sweep of HBM bandwidth x batch (CSV and SVG) and, when playwright
and chromium are installed, a screenshot of the report's first screen.
"""
from __future__ import annotations

import sys
from pathlib import Path

LAYOUT = ["--model", "llama70b", "--tp", "2", "--dtype", "fp8", "--isl", "2048", "--osl", "512"]
SCENARIO = [*LAYOUT, "--batch", "64"]


def commands(out: Path) -> list[list[str]]:
    o = str(out)
    return [
        ["report", "--arch", "b200", "--baseline", "h100-sxm", *SCENARIO, "--out", f"{o}/b200-vs-h100-llama70b.html"],
        ["export", "--format", "xlsx", "--arch", "b200", "--arch", "h100-sxm", *SCENARIO,
         "--out", f"{o}/b200-vs-h100-llama70b.xlsx"],
        ["export", "--format", "csv", "--arch", "b200", *SCENARIO, "--out", f"{o}/b200-llama70b"],
        ["sweep", "--arch", "b200", *LAYOUT,
         "--vary", "hbm_bandwidth=4TB/s:12TB/s:9", "--vary", "batch=1,8,64,max",
         "--out", f"{o}/b200-llama70b-sweep.csv", "--plot", f"{o}/b200-llama70b-sweep.svg"],
    ]


def screenshot(html: Path, png: Path, chromium: str = "/usr/bin/chromium") -> bool:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return False
    if not Path(chromium).exists():
        return False
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--disable-sync"])
        page = b.new_page(viewport={"width": 1366, "height": 768})
        page.goto(html.resolve().as_uri())
        page.screenshot(path=str(png))
        b.close()
    return True


def main(argv: list[str] | None = None) -> int:
    from ..cli import main as cli_main
    import argparse

    ap = argparse.ArgumentParser(prog="python -m perfmodel.outputs.examples", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder for the examples (the shipped ones: docs/examples)")
    out = Path(ap.parse_args(argv).out)
    out.mkdir(parents=True, exist_ok=True)
    for cmd in commands(out.relative_to(Path.cwd()) if out.is_relative_to(Path.cwd()) else out):
        saved = sys.argv
        sys.argv = ["perfmodel", *cmd]  # provenance records the command as run
        try:
            rc = cli_main(cmd)
        finally:
            sys.argv = saved
        if rc:
            return rc
    png = out / "report-first-screen.png"
    if screenshot(out / "b200-vs-h100-llama70b.html", png):
        print(f"wrote {png}", file=sys.stderr)
    else:
        print("no screenshot (needs pip install playwright and apt-get install chromium)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
