"""The family table of docs/backtest.md, regenerated.

    python docs/tools/backtest_family_table.py > /tmp/table.md     # about a minute on two cores

Each cell reads *before / blind / ceilings / own*: the H200 suite profile (calibration/h200) carried by the
datasheet rule; the H200's TensorRT-LLM profile (calibration/h200-sxm-trtllm) carried blind (the datasheet rule:
nothing of the target's tables read); the same relative to the target's sustained ceilings (which `perfmodel
sustained` measured from the target's own tables: not blind); the target's own profile on its held-out rows. Median |error| (signed median) by family, as ``perfmodel backtest``
pools them.
"""
from __future__ import annotations

from perfmodel.backtest import backtest, summary_by_family
from perfmodel.paths import repo_root

TARGETS = (("B200", "b200-trtllm"), ("GB200", "gb200-trtllm"), ("B300", "b300-trtllm"), ("GB300", "gb300-trtllm"),
           ("H100", "h100-sxm-trtllm"))
FAMILIES = ("gemm bf16", "gemm fp8", "gemm fp8_block", "gemm fp4", "attention prefill", "attention decode",
            "moe bf16", "moe fp8", "moe fp8_block", "moe fp4", "quantize", "collectives latency",
            "collectives middle", "collectives bandwidth")


def _cell(x) -> str:
    return "-" if not x else f"{x['median_abs_error']:.0%} ({x['signed_median']:+.0%})"


def table() -> str:
    """The family table of docs/backtest.md (marked block ``family-table``; docs/tools/regenerate.py)."""
    cal = repo_root() / "calibration"
    columns = []
    for _, target in TARGETS:
        before = summary_by_family(backtest(cal / "h200", cal / target))
        carried = summary_by_family(backtest(cal / "h200-sxm-trtllm", cal / target))
        columns.append((before, carried))
    lines = ["| family | " + " | ".join(name for name, _ in TARGETS) + " |", "|---|" + "---|" * len(TARGETS)]
    for fam in FAMILIES:
        cells = []
        for before, carried in columns:
            if fam not in carried and fam not in before:
                cells.append("-")
                continue
            b, c = before.get(fam, {}), carried.get(fam, {})
            cells.append(f"{_cell(b.get('datasheet'))} / {_cell(c.get('datasheet'))} / {_cell(c.get('sustained'))} / "
                         f"{_cell(c.get('own'))}")
        lines.append(f"| {fam} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
