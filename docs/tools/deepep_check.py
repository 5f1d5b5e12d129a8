"""DeepEP's measured low-latency dispatch and combine beside the all-to-all a projection prices (docs/collectives.md).

aiconfigurator-core ships SGLang 0.5.12's DeepEP low-latency kernels timed on one node of each part
(``systems/data/<part>/comm/sglang/0.5.12/wideep_deepep_ll_perf.parquet``: tokens per rank, hidden size, experts,
top-k; microseconds and the GB/s each moved). For DeepSeek-V3's MoE (hidden 7,168, 256 experts, top-8) this
prints, per part and tokens per rank, the measured dispatch and combine against perfmodel's ``moe.dispatch`` and
``moe.combine`` of a decode step at EP 8 over attention DP 8 with ``--moe-exchange all_to_all`` under the SGLang
preset, and the bytes per routed token-expert pair each side moves (the table's: its GB/s times its time).

    python docs/tools/deepep_check.py

Needs aiconfigurator-core 0.12.0 (``pip install -e '.[import]'``; docs/tools/regenerate.py skips the block
without it). Then each SGLang folder's fitted constants (perfmodel.fit.deepep), their error on the shapes the fit
held out, and the error of the same rows fitted without the per-expert term; then the low-latency calls across 2-8
HGX nodes that the Hopper parts' older tables time, beside the collective model that prices them; then the normal
calls across nodes beside their fit and the collective model on a token once per node and once per rank.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PARTS = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200",
         "gb300": "gb300"}
HIDDEN, EXPERTS, TOP_K, EP = 7168, 256, 8, 8
TOKENS = (8, 64, 256, 1024)


def measured(system: str):
    """The table's rows at DeepSeek-V3's MoE shape, by tokens per rank."""
    import pandas as pd

    from perfmodel.imports.aiconfigurator import find_source

    path = find_source().data / system / "comm" / "sglang" / "0.5.12" / "wideep_deepep_ll_perf.parquet"
    d = pd.read_parquet(path)
    d = d[(d.hidden_size == HIDDEN) & (d.num_experts == EXPERTS) & (d.num_topk == TOP_K) & (d.node_num == 1)]
    return {int(r.num_token): r for r in d.itertuples()}


def projected(part: str, tokens: int) -> tuple:
    """(dispatch s, combine s, dispatch bytes, combine bytes) of one MoE layer's exchange on one rank."""
    from perfmodel.projection import step

    ph = step(part, "deepseek-v3", "decode", tokens * EP, context=1024, tp=1, attention_dp=EP, ep=EP, dtype="fp8",
              engine="sglang", batching="static", moe_exchange="all_to_all")
    ops = {t.op.name: t for t in ph.times}
    d, c = ops["moe.dispatch"], ops["moe.combine"]
    return d.time, c.time, d.op.params["bytes"], c.op.params["bytes"]


FOLDERS = ("h100-sxm-sglang", "h200-sxm-sglang", "b200-sglang", "b300-sglang")


def fit_table() -> str:
    """Each SGLang folder's fitted constants and held-out error (its profile's record of perfmodel.fit.deepep),
    beside what the same rows give without the per-expert term (alpha + bytes / bandwidth, fitted alike)."""
    import numpy as np
    from scipy.optimize import nnls

    from perfmodel.fit.deepep import DEEPEP_DIRECTIONS as DIRECTIONS, deepep_rows
    from perfmodel.fit.directory import measurements_path
    from perfmodel.measure.store import read_rows
    from perfmodel.profile import load_profile

    lines = ["| folder | direction | fixed (us) | per expert (ns) | bandwidth (GB/s) | held out: median / P90 | "
             "rows | without the per-expert term, in-sample: median / P90 |", "|---|---|---|---|---|---|---|---|"]
    for name in FOLDERS:
        folder = ROOT / "calibration" / name
        fits = load_profile(folder).provenance["deepep"]
        rows = deepep_rows(read_rows(measurements_path(folder)))
        for d in DIRECTIONS:
            f, mine = fits[d], [r for r in rows if r["params"]["direction"] == d]
            t = np.array([r["time_s"] for r in mine])
            a = np.c_[np.ones(len(t)), [r["params"]["bytes"] for r in mine]]
            x, _ = nnls(a / t[:, None], np.ones(len(t)))
            e = np.abs(a @ x / t - 1)
            ho = f["held_out"]
            lines.append(f"| {name} | {d} | {f['alpha_s'] * 1e6:.1f} | {f['expert_s'] * 1e9:.1f} | "
                         f"{f['bandwidth_gbs']:.0f} | {ho['median_abs_error']:.1%} / {ho['p90_abs_error']:.1%} | "
                         f"{len(mine)} | {np.median(e):.1%} / {np.quantile(e, 0.9):.1%} |")
    return "\n".join(lines)


# the part whose tables time DeepEP across HGX nodes (the H100's file of that release holds the same times)
ACROSS = {"h200_sxm": "h200-sxm"}
ACROSS_VERSION = "0.5.6.post2"


def across_table() -> str:
    """DeepEP's low-latency calls across 2-8 HGX nodes (SGLang 0.5.6.post2's tables, DeepSeek-V3's MoE, EP 8 a
    node) beside the projection, which prices them by the part's fit across nodes (the remote ranks' share of the
    bytes over each rank's NIC; these calls are among the fitted ones)."""
    import pandas as pd

    from perfmodel.cost.comm import collective_time
    from perfmodel.graph import deepep_ll_dispatch_bytes
    from perfmodel.imports.aiconfigurator import find_source
    from perfmodel.resolve import setup

    lines = ["| part | nodes (EP) | tokens per rank | dispatch measured / projected (us) | "
             "combine measured / projected (us) |", "|---|---|---|---|---|"]
    errors: list[float] = []
    for system, part in ACROSS.items():
        d = pd.read_parquet(find_source().data / system / "comm" / "sglang" / ACROSS_VERSION
                            / "wideep_deepep_ll_perf.parquet")
        d = d[(d.hidden_size == HIDDEN) & (d.num_experts == EXPERTS) & (d.num_topk == TOP_K) & (d.node_num > 1)]
        s = setup(part, "deepseek-v3", {"engine": "sglang"})
        for r in d.sort_values(["node_num", "num_token"]).itertuples():
            if int(r.num_token) not in (8, 64, 256):
                continue
            ep, pairs = 8 * int(r.node_num), int(r.num_token) * TOP_K
            times = [collective_time("all_to_all", pairs * per_pair, ep, ep, s.hardware, s.profile,
                                     kernel=f"ll.{direction}", experts=EXPERTS) * 1e6
                     for direction, per_pair in (("dispatch", deepep_ll_dispatch_bytes(HIDDEN)),
                                                 ("combine", 2.0 * HIDDEN))]
            errors += [times[0] / r.dispatch_avg_t_us - 1, times[1] / r.combine_avg_t_us - 1]
            lines.append(f"| {part} | {int(r.node_num)} ({ep}) | {int(r.num_token):,} | "
                         f"{r.dispatch_avg_t_us:.1f} / {times[0]:.1f} | {r.combine_avg_t_us:.1f} / {times[1]:.1f} |")
    return ("\n".join(lines) + f"\n\nMedian |error| over these calls: {statistics.median(abs(e) for e in errors):.0%}"
            f" (signed {statistics.median(errors):+.0%}).")


NORMAL_TOKENS = (128, 1024, 4096, 16384)


def normal_across_table() -> str:
    """DeepEP's normal calls (the prefill kernels) across 2-8 HGX nodes at the engines' 20 SMs (SGLang 0.5.6.post2's
    tables, DeepSeek-V3's MoE shape, the collector's routing taken uniform), a call being its notify plus its transmit:
    measured, projected by the fit across nodes (perfmodel.fit.deepep, these calls among its rows), by the collective
    model on the same bytes over the NIC (a token once per remote node) and by the collective model on a token once
    per remote rank (what every all-to-all across domains was priced as before)."""
    import pandas as pd

    from perfmodel import ops as O
    from perfmodel.cost.comm import collective_time, per_node_bytes
    from perfmodel.graph import deepep_normal_copy_bytes
    from perfmodel.imports.aiconfigurator import DEEPEP_ENGINE_SMS, find_source
    from perfmodel.models import MoE
    from perfmodel.resolve import setup
    from perfmodel.routing import ranks_per_token

    uniform = MoE(num_experts=EXPERTS, top_k=TOP_K, expert_intermediate=1)
    lines = ["| part | nodes (EP) | tokens per rank | dispatch measured / fit / per node / per rank (us) | "
             "combine measured / fit / per node / per rank (us) |", "|---|---|---|---|---|"]
    errors: dict[str, list[float]] = {"fit": [], "per node": [], "per rank": []}
    for system, part in ACROSS.items():
        d = pd.read_parquet(find_source().data / system / "comm" / "sglang" / ACROSS_VERSION
                            / "wideep_deepep_normal_perf.parquet")
        d = d[(d.hidden_size == HIDDEN) & (d.num_experts == EXPERTS) & (d.num_topk == TOP_K) & (d.node_num > 1)
              & (d.dispatch_sms == DEEPEP_ENGINE_SMS)]
        s = setup(part, "deepseek-v3", {"engine": "sglang"})
        hw, prof = s.hardware, s.profile
        bare = prof.with_(deepep_scaleout_alpha_s={}, deepep_scaleout_eta={})
        for r in d.sort_values(["node_num", "num_token"]).itertuples():
            if int(r.num_token) not in NORMAL_TOKENS:
                continue
            ep, tokens = 8 * int(r.node_num), int(r.num_token)
            cells = []
            for direction, value in (("dispatch", 1.0), ("combine", 2.0)):
                copy = deepep_normal_copy_bytes(HIDDEN, value)
                per_node = O.per_node_copies(float(tokens), copy, uniform)
                nbytes = tokens * ranks_per_token(EXPERTS, TOP_K, ep) * copy
                nic = per_node_bytes(per_node, ep, hw)
                got = (collective_time("all_to_all", nbytes, ep, ep, hw, prof, kernel=f"normal.{direction}",
                                       experts=EXPERTS, scaleout_bytes=nic),
                       collective_time("all_to_all", nbytes, ep, ep, hw, bare, scaleout_bytes=nic),
                       collective_time("all_to_all", nbytes, ep, ep, hw, bare))
                meas = (getattr(r, f"{direction}_transmit_us") + getattr(r, f"{direction}_notify_us")) * 1e-6
                for k, t in zip(errors, got):
                    errors[k].append(t / meas - 1)
                cells.append(f"{meas * 1e6:,.0f} / " + " / ".join(f"{t * 1e6:,.0f}" for t in got))
            lines.append(f"| {part} | {int(r.node_num)} ({ep}) | {tokens:,} | {cells[0]} | {cells[1]} |")
    summary = "; ".join(f"{k} {statistics.median(abs(e) for e in v):.0%} (signed {statistics.median(v):+.0%})"
                        for k, v in errors.items())
    return "\n".join(lines) + f"\n\nMedian |error| over these calls: {summary}."


def markdown() -> str:
    errors: dict[str, list[float]] = {"dispatch": [], "combine": []}
    lines = ["| part | tokens per rank | dispatch measured / projected (us) | combine measured / projected (us) | "
             "bytes per token-expert pair, dispatch measured / projected | combine measured / projected |",
             "|---|---|---|---|---|---|"]
    for system, part in PARTS.items():
        rows = measured(system)
        for n in TOKENS:
            if n not in rows:
                continue
            r = rows[n]
            d_s, c_s, d_b, c_b = projected(part, n)
            pairs = n * TOP_K  # routed token-expert pairs of this rank's tokens
            errors["dispatch"].append(d_s * 1e6 / r.dispatch_avg_t_us - 1)
            errors["combine"].append(c_s * 1e6 / r.combine_avg_t_us - 1)
            md_b = r.dispatch_bandwidth_gbps * r.dispatch_avg_t_us * 1e3 / pairs
            mc_b = r.combine_bandwidth_gbps * r.combine_avg_t_us * 1e3 / pairs
            lines.append(f"| {part} | {n:,} | {r.dispatch_avg_t_us:.1f} / {d_s * 1e6:.1f} | "
                         f"{r.combine_avg_t_us:.1f} / {c_s * 1e6:.1f} | {md_b:,.0f} / {d_b / pairs:,.0f} | "
                         f"{mc_b:,.0f} / {c_b / pairs:,.0f} |")
    summary = "; ".join(f"{k} {statistics.median(abs(e) for e in v) * 100:.0f}% (signed "
                        f"{statistics.median(v) * 100:+.0f}%)" for k, v in errors.items())
    return ("\n".join(lines) + f"\n\nMedian |error| of the projected times over these rows: {summary} (in-sample "
            f"on the parts with a fit of their own, whose held-out errors are in the next table; GB200 and GB300 "
            f"carried).\n\n"
            f"The fits (`perfmodel fit DIR --only deepep`; errors relative to the measured time):\n\n{fit_table()}"
            f"\n\nAcross 8-GPU nodes (SGLang {ACROSS_VERSION}'s tables at DeepSeek-V3's MoE; the projection's "
            f"all-to-all across NVLink domains):\n\n{across_table()}"
            f"\n\nThe normal kernels across 8-GPU nodes (SGLang {ACROSS_VERSION}'s tables, 20 SMs):\n\n"
            f"{normal_across_table()}")


if __name__ == "__main__":
    print(markdown())
