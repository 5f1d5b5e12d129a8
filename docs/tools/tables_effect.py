"""The "effect on projections" table of docs/tables.md: TTFT and TPOT with the part's own measured tables (the
default) against the fitted model alone (``perfmodel.cost.tables.without_tables``), for a few scenarios per part.

    python docs/tools/tables_effect.py          # a few seconds
"""
from __future__ import annotations

# (part, model, scenario overrides, what the row shows)
CASES = (
    ("b200", "llama70b", {}, "bf16, batch 1"),
    ("b200", "llama70b", {"dtype": "fp4"}, "fp4"),
    ("b200", "llama70b", {"dtype": "fp8", "tp": 8, "batch": 64}, "fp8, TP 8, batch 64"),
    ("b200", "mixtral", {"dtype": "fp8", "tp": 2, "batch": 8}, "fp8, TP 2, batch 8"),
    ("gb200", "deepseek-v3", {"dtype": "fp4", "tp": 8, "ep": 8}, "fp4, TP 8, EP 8"),
    ("b300", "llama70b", {"dtype": "fp4"}, "fp4"),
    ("b300", "mixtral", {"dtype": "fp4", "tp": 2, "batch": 8}, "fp4, TP 2, batch 8; MoE kernel carried"),
    ("gb300", "deepseek-v3", {"dtype": "fp4", "tp": 8, "ep": 8}, "fp4, TP 8, EP 8; MoE kernel carried"),
    ("h200-sxm", "llama70b", {"dtype": "fp8"}, "fp8"),
    ("h200-sxm", "llama8b", {"batch": 32}, "bf16, batch 32"),
)


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.1f}" if ms >= 10 else f"{ms:.2f}"


def table() -> str:
    from perfmodel import project
    from perfmodel.cost.tables import without_tables
    from perfmodel.resolve import resolve_hardware, resolve_profile

    lines = ["| part | model, scenario | TTFT fit alone -> tables (ms) | TPOT fit alone -> tables (ms) |",
             "|---|---|---|---|"]
    for part, model, overrides, words in CASES:
        hw = resolve_hardware(part)
        on = project(hw, model, **overrides)
        off = project(hw, model, profile=without_tables(resolve_profile(None, hw, on.scenario.engine)), **overrides)
        lines.append(f"| {part} | {model} ({words}) | {_ms(off.ttft_s)} -> {_ms(on.ttft_s)} "
                     f"| {_ms(off.tpot_s)} -> {_ms(on.tpot_s)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
