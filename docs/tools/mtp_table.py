"""The tables of docs/speculative.md: DeepSeek-V3's TPOT with and without one multi-token-prediction draft
token against batch, on 8 H200s and 8 B200s in fp8 (TensorRT-LLM's kernels), from `perfmodel project` and from
the serving simulator (`perfmodel serve`) side by side; and Llama-3.1-70B on 4 H200s with a Llama-3.1-8B draft
model, by draft length, acceptance and batch (`project`).

    python docs/tools/mtp_table.py          # about half a minute
"""
from __future__ import annotations

BATCHES = (1, 4, 16, 64)
PARTS = (("h200-sxm", "8 H200"), ("b200", "8 B200"))
ACCEPT = 0.8  # the DeepSeek-V3 technical report's acceptance of the second token: 85-90% (arXiv 2412.19437)
WAVES = 5  # closed-loop requests per unit of concurrency: the steady-state window is the middle two waves
MIN_REQUESTS = 40  # at small batches, enough requests that the mean TPOT is not a few requests' draws
OSL = "uniform:64:192"  # output lengths of mean 128 (project's default) that spread, so that the closed loop does not run
# in lock step (every request prefilled together, then decoded together), which MTP's random runs would break


def serve_tpot(hw, model, prof, batch: int, **spec) -> tuple[float, float, float | None]:
    """(mean TPOT s, p90 TPOT s, tokens per verify step observed) of a closed loop of ``batch`` requests in flight,
    1024 in and 64-192 out (OSL), ``--batch batch``, over the steady state (perfmodel.serve.simulate)."""
    from perfmodel.scenario import Scenario
    from perfmodel.serve.simulate import ServeOptions, simulate
    from perfmodel.serve.workload import closed_loop_requests, parse_dist

    sc = Scenario(tp=8, dtype="fp8", batch=batch, **spec)
    reqs = closed_loop_requests(max(WAVES * batch, MIN_REQUESTS), batch, parse_dist("1024", field="isl"), parse_dist(OSL, field="osl"))
    out = simulate(hw, model, sc, prof, reqs, ServeOptions())
    tokens = out["speculation"]["observed_tokens_per_step"] if "speculation" in out else None
    return out["tpot_ms"]["mean"] / 1e3, out["tpot_ms"]["p90"] / 1e3, tokens


def table() -> str:
    from perfmodel import project
    from perfmodel.resolve import resolve_hardware, resolve_model, resolve_profile

    model = resolve_model("deepseek-v3")
    lines = ["| GPUs | batch | project: no MTP (ms) | project: --mtp 1 (ms) | change | serve: no MTP (ms) | "
             "serve: --mtp 1 (ms; p90) | change | serve: tokens per verify step |",
             "|---|---|---|---|---|---|---|---|---|"]
    for part, label in PARTS:
        hw = resolve_hardware(part)
        prof = resolve_profile(None, hw)
        for b in BATCHES:
            base = project(hw, model, tp=8, dtype="fp8", batch=b).tpot_s
            spec = project(hw, model, tp=8, dtype="fp8", batch=b, mtp=1, mtp_accept=ACCEPT).tpot_s
            s_base, _, _ = serve_tpot(hw, model, prof, b)
            s_spec, s_p90, tokens = serve_tpot(hw, model, prof, b, mtp=1, mtp_accept=ACCEPT)
            lines.append(f"| {label} | {b} | {base * 1e3:.2f} | {spec * 1e3:.2f} | {spec / base - 1:+.0%} "
                         f"| {s_base * 1e3:.2f} | {s_spec * 1e3:.2f} ({s_p90 * 1e3:.2f}) | {s_spec / s_base - 1:+.0%} "
                         f"| {tokens:.2f} |")
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


TREE_ACCEPT = 0.7  # the chain's flat acceptance the trees are set against
TREES = ((2, 6), (4, 8), (4, 13))  # (candidates a draft step, nodes verified) of three draft steps


def _break_even(tpot_at, target: float) -> float | None:
    """The flat acceptance at which ``tpot_at(a)`` falls to ``target`` (bisection; TPOT falls as acceptance grows),
    or None where even 0.99 does not reach it."""
    lo, hi = 0.0, 0.99
    if tpot_at(hi) > target:
        return None
    for _ in range(30):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if tpot_at(mid) > target else (lo, mid)
    return hi


def tree_table() -> str:
    """Llama-3.1-70B drafted by Llama-3.1-8B, three draft steps: a chain at flat 0.7 against token trees of the
    same depth, their TPOT at the same acceptance and the acceptance each must reach to match the chain."""
    from perfmodel import project

    lines = ["| draft tokens verified | candidates a step | " +
             " | ".join(f"TPOT at batch {b} (ms), same acceptance | break-even acceptance at batch {b}"
                        for b in DRAFT_BATCHES) + " |",
             "|---|---|" + "---|---|" * len(DRAFT_BATCHES)]
    kw = dict(tp=4, mtp=3, draft="llama8b")
    chain = {b: project("h200-sxm", "llama70b", batch=b, mtp_accept=TREE_ACCEPT, **kw).tpot_s for b in DRAFT_BATCHES}
    lines.append("| 4 (a chain) | 1 | " + " | ".join(f"{chain[b] * 1e3:.2f} | {TREE_ACCEPT:.2f}" for b in DRAFT_BATCHES)
                 + " |")
    for w, n in TREES:
        cells = []
        for b in DRAFT_BATCHES:
            def tpot_at(a, b=b):
                return project("h200-sxm", "llama70b", batch=b, mtp_accept=a, spec_topk=w, spec_verify=n, **kw).tpot_s
            even = _break_even(tpot_at, chain[b])
            cells.append(f"{tpot_at(TREE_ACCEPT) * 1e3:.2f} | " + ("above 0.99" if even is None else f"{even:.2f}"))
        lines.append(f"| {n} | {w} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
    print()
    print(draft_table())
    print()
    print(tree_table())
