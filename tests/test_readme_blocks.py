"""README.md prints command outputs: each is what the command prints today (docs/tools/readme_blocks.py)."""
from __future__ import annotations

import importlib.util

from perfmodel.paths import repo_root

ROOT = repo_root()


def _tool():
    spec = importlib.util.spec_from_file_location("readme_blocks", ROOT / "docs" / "tools" / "readme_blocks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_readme_blocks_are_what_the_commands_print():
    tool = _tool()
    found = tool.blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert set(found) == set(tool.BLOCKS)
    for name, body in found.items():
        assert body == tool.output(name), f"stale README block {name!r}: run python docs/tools/readme_blocks.py --write"


def test_readme_h200_table_is_the_calibration_docs():
    """README's H200 held-out table states what docs/calibration-h200/README.md (generated from the fit) says."""
    import re

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    doc = (ROOT / "docs" / "calibration-h200" / "README.md").read_text(encoding="utf-8")

    def row(text, head):
        m = re.search(r"^\| " + re.escape(head) + r" \| (\d+) \| ([\d.]+%) \| ([\d.]+%) \|", text, re.M)
        assert m, head
        return m.groups()

    pairs = {"GEMM (bf16, fp16, fp8 tensor and rowwise, tf32, fp32)": "held-out | gemm",
             "attention, PyTorch default dispatch (cuDNN), prefill": "attention (default: cudnn) | prefill",
             "attention, PyTorch default dispatch (cuDNN), decode": "attention (default: cudnn) | decode",
             "attention, FlashAttention-2 forced, prefill": "attention (flash) | prefill",
             "attention, FlashAttention-2 forced, decode": "attention (flash) | decode",
             "attention in a CUDA-graph stream (default dispatch)": "held-out | attention in-stream (default: cudnn)",
             "memory-bound operators": "held-out | memory",
             "memory-bound operators in a stream": "held-out | memory in-stream",
             "whole decoder layers, prefill (eager, never fitted)": "whole layers | prefill",
             "whole decoder layers, decode (CUDA graph, never fitted)": "whole layers | decode"}
    for ours, theirs in pairs.items():
        assert row(readme, ours) == row(doc, theirs), ours


def test_readme_table_count_is_the_docs():
    import re

    doc = (ROOT / "docs" / "tables.md").read_text(encoding="utf-8")
    m = re.search(r"Of (\d+) classes the engines run, the table beats the fit at the median in (\d+); \d+ reach 3% "
                  r"median, (\d+) both", doc)
    assert m
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert f"in {m.group(2)} of {m.group(1)} classes, {m.group(3)} of them within 3% median and 10% P90" in readme
