"""The tables of docs/speculative.md: DeepSeek-V3's TPOT with and without one multi-token-prediction draft
token against batch, on 8 H200s in fp8 (TensorRT-LLM's kernels); and Llama-3.1-70B on 4 H200s with a
Llama-3.1-8B draft model, by draft length, acceptance and batch.

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


# acceptance of each draft position given the ones before: flat, and falling along the draft (estimates that
# span what draft models of a family are reported to reach; the tool takes whatever the user measured)
PROFILES = (("flat 0.7", (0.7, 0.7, 0.7, 0.7)), ("falling 0.8, 0.7, 0.6, 0.5", (0.8, 0.7, 0.6, 0.5)))
DRAFT_BATCHES = (1, 8, 64)


def draft_table() -> str:
    from perfmodel import project

    lines = ["| acceptance | draft tokens | tokens per verify step | " +
             " | ".join(f"TPOT at batch {b} (ms; no draft)" for b in DRAFT_BATCHES) + " |",
             "|---|---|---|" + "---|" * len(DRAFT_BATCHES)]
    base = {b: project("h200-sxm", "llama70b", tp=4, batch=b).tpot_s for b in DRAFT_BATCHES}
    for name, rates in PROFILES:
        for k in (1, 2, 4):
            cells, tokens = [], 0.0
            for b in DRAFT_BATCHES:
                p = project("h200-sxm", "llama70b", tp=4, batch=b, mtp=k, mtp_accept=rates[:k], draft="llama8b")
                tokens = p.scenario.tokens_per_step
                cells.append(f"{p.tpot_s * 1e3:.2f} ({base[b] * 1e3:.2f}, {p.tpot_s / base[b] - 1:+.0%})")
            lines.append(f"| {name} | {k} | {tokens:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
    print()
    print(draft_table())
