"""Every generated figure of README.md and docs/, in one place: each marked block beside the script that prints it.

    python docs/tools/regenerate.py             # which blocks differ from what their scripts print now
    python docs/tools/regenerate.py --write     # rewrites them (asked for: README.md and docs/ are tracked)
    python docs/tools/regenerate.py --write --only what-if.md

A block of docs/ sits between ``<!-- TAG: begin -->`` and ``<!-- TAG: end -->``; README.md's command outputs
between ``<!-- block: NAME -->`` and ``<!-- /block -->`` (docs/tools/readme_blocks.py). tests/test_docs_generated.py
checks that every marked block is registered here and that the registered scripts reproduce them (the slow ones
in the slow tier). Figures checked in prose by their own tests (docs/narrow-gemm.md, docs/validation-silicon.md's
pins) are listed in ``PROSE`` with the test that holds them.
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Block:
    doc: str  # under docs/
    tag: str
    tool: str  # under docs/tools/
    function: str  # prints the block's text
    slow: bool = False  # checked in the slow test tier: 2 s or more to print (the default tier's time, issue 28)
    needs: str = ""  # "DIST==VERSION": a package the script reads that the base install lacks (skipped without it)


def missing(block: Block) -> str:
    """Why ``block`` cannot be printed here ("" if it can): the package it needs at the version it was made with."""
    if not block.needs:
        return ""
    from importlib.metadata import PackageNotFoundError, version

    dist, want = block.needs.split("==")
    try:
        have = version(dist)
    except PackageNotFoundError:
        return f"needs {block.needs} (not installed)"
    return "" if have == want else f"needs {block.needs} (installed: {have})"


BLOCKS = (
    Block("power-clock.md", "power-clock-tables", "power_clock_table.py", "tables"),
    Block("power-clock.md", "power-clock-h100", "power_clock_table.py", "h100_tables"),
    Block("speculative.md", "mtp-table", "mtp_table.py", "table"),
    Block("speculative.md", "draft-table", "mtp_table.py", "draft_table"),
    Block("speculative.md", "tree-table", "mtp_table.py", "tree_table"),
    Block("speculative.md", "verify-attention", "verify_attention_check.py", "markdown"),
    Block("training.md", "grouped-gemm", "grouped_gemm_check.py", "markdown"),
    Block("engines.md", "padded-layout", "padded_layout_check.py", "markdown"),
    Block("model.md", "deltanet", "deltanet_check.py", "markdown"),
    Block("model.md", "deltanet-tables", "deltanet_tables.py", "markdown", slow=True),  # 9 s: 15 folders
    Block("model.md", "routing-table", "routing_table.py", "table", slow=True),
    Block("tables.md", "tables-table", "tables_table.py", "tables"),
    Block("tables.md", "tables-effect", "tables_effect.py", "table"),
    Block("what-if.md", "what-if-examples", "what_if_table.py", "examples"),
    Block("what-if.md", "what-if-departures", "what_if_table.py", "departures", slow=True),
    Block("models.md", "models-projections", "models_table.py", "projections", slow=True),
    Block("engines.md", "release-tables", "releases_table.py", "markdown"),
    Block("engines.md", "engine-presets", "engines_table.py", "table"),
    Block("engines.md", "shared-streams", "streams_check.py", "markdown", slow=True),  # 2 s: eight projections
    Block("engines.md", "model-defaults", "model_defaults_check.py", "markdown", slow=True),  # 27 projections
    Block("training.md", "moe-layouts", "moe_layout_table.py", "table"),
    Block("training.md", "moe-layout-pairs", "moe_layout_table.py", "pairs_table"),
    Block("vision.md", "vision-encoders", "vision_table.py", "encoders"),
    Block("vision.md", "vision-projections", "vision_table.py", "projections"),
    Block("capacity.md", "capacity-example", "capacity_example.py", "example", slow=True),
    Block("backtest.md", "family-table", "backtest_family_table.py", "table", slow=True),
    Block("backtest.md", "h100-carry", "h100_carry_check.py", "markdown"),
    Block("validation-silicon.md", "peer-estimate", "peer_estimate.py", "markdown", slow=True,
          needs="aiconfigurator-core==0.12.0"),
    Block("validation-silicon.md", "ep-skew", "ep_skew_table.py", "table"),
    Block("collectives.md", "comm-fit", "comm_fit_check.py", "markdown"),
    Block("collectives.md", "deepep-ll", "deepep_check.py", "markdown", slow=True,
          needs="aiconfigurator-core==0.12.0"),
    Block("collectives.md", "a2a-engines", "a2a_engines.py", "markdown", slow=True),  # 2 s: 27 projected steps
    Block("engines.md", "dsa-module", "dsa_module_check.py", "markdown", slow=True,  # 6 s: 72 decode steps
          needs="aiconfigurator-core==0.12.0"),
)

# Figures in prose, each held by a test that recomputes it (not rewritten by this script)
PROSE = {
    "narrow-gemm.md": "tests/test_narrow_gemm.py::test_doc_figures_are_todays",
    "validation-silicon.md": "tests/test_accuracy_pins.py (python docs/tools/accuracy_pins.py --slow --write)",
}

MARK = re.compile(r"<!-- ([\w-]+): begin -->\n(.*?)\n<!-- \1: end -->", re.S)


def tool_function(block: Block):
    spec = importlib.util.spec_from_file_location(block.tool.removesuffix(".py"), ROOT / "docs" / "tools" / block.tool)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, block.function)


def marked(text: str) -> dict[str, str]:
    """The marked blocks of a document, by tag."""
    return {m.group(1): m.group(2) for m in MARK.finditer(text)}


def replace(text: str, tag: str, body: str) -> str:
    start, end = f"<!-- {tag}: begin -->\n", f"\n<!-- {tag}: end -->"
    a = text.index(start) + len(start)
    return text[:a] + body + text[text.index(end, a):]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the blocks that differ")
    ap.add_argument("--only", help="one document under docs/ (or README.md)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    drift = 0
    for block in BLOCKS:
        if args.only and args.only != block.doc:
            continue
        path = ROOT / "docs" / block.doc
        text = path.read_text(encoding="utf-8")
        if missing(block):
            print(f"docs/{block.doc} {block.tag}: not checked, {missing(block)}")
            continue
        now = tool_function(block)()
        if marked(text).get(block.tag) == now:
            print(f"docs/{block.doc} {block.tag}: as printed")
            continue
        drift += 1
        print(f"docs/{block.doc} {block.tag}: differs" + ("; rewritten" if args.write else ""))
        if args.write:
            from perfmodel.io import write_text_atomic

            write_text_atomic(path, replace(text, block.tag, now))
    if not args.only or args.only == "README.md":
        spec = importlib.util.spec_from_file_location("readme_blocks", ROOT / "docs" / "tools" / "readme_blocks.py")
        readme = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(readme)
        text = (ROOT / "README.md").read_text(encoding="utf-8")
        new = readme.rewrite(text)
        if new != text:
            drift += 1
            print("README.md command blocks: differ" + ("; rewritten" if args.write else ""))
            if args.write:
                from perfmodel.io import write_text_atomic

                write_text_atomic(ROOT / "README.md", new)
        else:
            print("README.md command blocks: as printed")
    return 1 if drift and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
