"""The MTP table of docs/speculative.md: DeepSeek-V3's TPOT with and without one multi-token-prediction draft
token against batch, on 8 H200s in fp8 (TensorRT-LLM's kernels).

    python docs/tools/mtp_table.py          # a few seconds
"""
from __future__ import annotations

BATCHES = (1, 4, 16, 64, 256)
ACCEPT = 0.8  # the DeepSeek-V3 technical report's acceptance of the second token: 85-90% (arXiv 2412.19437)


def table() -> str:
    from perfmodel import project

    lines = ["| batch | TPOT, no MTP (ms) | TPOT, --mtp 1 --mtp-accept 0.8 (ms) | change | tokens per verify step |",
             "|---|---|---|---|---|"]
    for b in BATCHES:
        base = project("h200-sxm", "deepseek-v3", tp=8, dtype="fp8", batch=b)
        spec = project("h200-sxm", "deepseek-v3", tp=8, dtype="fp8", batch=b, mtp=1, mtp_accept=ACCEPT)
        lines.append(f"| {b} | {base.tpot_s * 1e3:.2f} | {spec.tpot_s * 1e3:.2f} | {spec.tpot_s / base.tpot_s - 1:+.0%} "
                     f"| {spec.scenario.tokens_per_step:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
