"""The tables of docs/models.md: parameter counts beside the cards', and "One projection per family" (its marked
block, ``projections``, is checked by tests/test_docs_generated.py and rewritten by docs/tools/regenerate.py).

    python docs/tools/models_table.py > /tmp/table.md

Parameter counts are checked against the model cards in tests/test_model_families.py (the card figures, their
sources and tolerances live there, next to the assertion); this script prints ours beside the card's and one
projection per model: the fewest H200 GPUs (tensor parallel, bf16, else fp8) the model fits on with room for a
batch, TensorRT-LLM preset, 1024 input and 1024 output tokens.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from perfmodel.errors import InputError
from perfmodel.models import load_model
from perfmodel.projection import project

ROOT = Path(__file__).resolve().parents[2]


def _cards():
    spec = importlib.util.spec_from_file_location("cards", ROOT / "tests" / "test_model_families.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["cards"] = mod
    spec.loader.exec_module(mod)
    return mod


def _fits(key: str):
    """The first (tp, dtype) on H200 that holds the model and a batch of 8 at 2048 tokens."""
    for tp in (1, 2, 4, 8):
        for dtype in ("bf16", "fp8"):
            try:
                project("h200", key, tp=tp, dtype=dtype, batch=8, isl=1024, osl=1024)
                return tp, dtype
            except InputError:
                continue
    return None


def projections() -> str:
    """The table of docs/models.md "One projection per family" (marked block ``models-projections``)."""
    cards = _cards()
    lines = ["| model | family | H200 layout | TPOT, batch 1 | tok/s per GPU at max batch (batch) |",
             "|---|---|---|---|---|"]
    for key in sorted(cards.CARDS):
        m = load_model(key)
        layout = _fits(key)
        if layout is None:
            lines.append(f"| {key} | {m.family} | does not fit 8 x H200 | | |")
            continue
        tp, dtype = layout
        one = project("h200", key, tp=tp, dtype=dtype, batch=1, isl=1024, osl=1024)
        big = project("h200", key, tp=tp, dtype=dtype, batch="max", isl=1024, osl=1024)
        lines.append(f"| {key} | {m.family} | TP{tp} {dtype} | {one.tpot_s * 1e3:.2f} ms | "
                     f"{big.throughput_tok_s_per_gpu:,.0f} ({big.batch}) |")
    return "\n".join(lines)


def main() -> None:
    cards = _cards()
    print("| model | family | total (ours) | card | active (ours) | card |")
    print("|---|---|---|---|---|---|")
    for key in sorted(cards.CARDS):
        m = load_model(key)
        row = cards.CARDS[key]
        tot = cards._ours(m, "total", row["total"].counts) if "total" in row else m.param_count()
        act = cards._ours(m, "active", row["active"].counts) if "active" in row else None
        card_t = f"{row['total'].figure / 1e9:g}B" if "total" in row else ""
        card_a = f"{row['active'].figure / 1e9:g}B" if "active" in row else ""
        act_s = f"{act / 1e9:.2f}B" if act is not None else ""
        print(f"| {key} | {m.family} | {tot / 1e9:.2f}B | {card_t} | {act_s} | {card_a} |")
    print()
    print(projections())


if __name__ == "__main__":
    main()
