"""NVIDIA's own estimator beside ours on the measured serving runs: what the kernel tables alone explain
(docs/validation-silicon.md).

aiconfigurator-core ships the measured serving runs (``systems/silicon_sample.csv``, imported as
``workloads/validation/aiconfigurator_silicon.csv``), the kernel tables perfmodel imports, and the estimator NVIDIA
composes those tables with. For every aggregated row whose model configuration the package ships (no network), this
prices one steady decode the same way in both tools, with no serving simulation around it: aiconfigurator's
``run_static(mode="static_gen")`` at the row's batch, layout and quantization (its ``current`` table version), and
perfmodel's projection with static batching at the same batch (``--batching static``), without the engine's front
end (``--api-servers 0``: docs/engines.md, "The front end"). Both omit what a served TPOT also holds (prefill chunks
sharing steps; aiconfigurator the scheduler too); measured TPOT minus either is the time the tables do not hold.

Two views: the median error of each against the measured TPOT by family and engine; and, at low concurrency
(<= 16 clients, >= 512 output tokens, where prefill shares few steps), the time per layer per decode step that
the measured runs spend beyond each estimate, by tensor parallelism.

    python docs/tools/peer_estimate.py            # both tables (about a minute)

Needs aiconfigurator-core 0.12.0, the release these figures were made with (``pip install -e '.[import]'``;
docs/tools/regenerate.py skips the block without it).
"""
from __future__ import annotations

import csv
import logging
import os
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SILICON = ROOT / "workloads" / "validation" / "aiconfigurator_silicon.csv"
ENGINES = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}
LOW_CONCURRENCY, LONG_OUTPUT = 16, 512  # the per-layer view: few prefill chunks among the decode steps
TPS = (1, 2, 4, 8)


class Row(NamedTuple):
    id: str
    line: int  # of aiconfigurator's silicon_sample.csv
    model: str
    family: str
    layers: int
    engine: str
    hardware: str
    tp: int
    concurrency: int
    osl: int
    measured_ms: float
    aic_ms: float
    ours_ms: float
    moe_ep: int = 1  # experts spread over this many ranks (1: each expert split over the MoE ranks, or dense)


def _sample_rows() -> dict[int, dict]:
    from perfmodel.imports.aiconfigurator import find_source

    with open(find_source().systems / "silicon_sample.csv", newline="") as f:
        return {i: r for i, r in enumerate(csv.DictReader(f), start=2)}


def _aic_estimates(sample: dict[int, dict], lines: set[int]) -> dict[int, float]:
    """aiconfigurator's static decode TPOT (ms) for each sample line it can price offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.disable(logging.WARNING)
    from aiconfigurator_core.sdk import common, config
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.perf_database import get_database

    out: dict[int, float] = {}
    seen: dict[tuple, float | None] = {}
    dbs: dict[tuple, object] = {}
    fields = ("system", "backend", "model_path", "gemm_quant_mode", "moe_quant_mode", "tp_size", "pp_size",
              "attention_dp_size", "moe_tp_size", "moe_ep_size", "batch_size", "isl", "osl")
    for line in sorted(lines):
        r = sample[line]
        key = tuple(r[f] for f in fields)
        if key not in seen:
            seen[key] = None
            try:
                db_key = (r["system"], r["backend"], "current")
                if db_key not in dbs:
                    dbs[db_key] = get_database(*db_key)
                mc = config.ModelConfig(
                    tp_size=int(r["tp_size"]), pp_size=int(r["pp_size"] or 1), moe_tp_size=int(r["moe_tp_size"] or 1),
                    moe_ep_size=int(r["moe_ep_size"] or 1), attention_dp_size=int(r["attention_dp_size"] or 1),
                    gemm_quant_mode=common.GEMMQuantMode[r["gemm_quant_mode"]],
                    moe_quant_mode=common.MoEQuantMode[r["moe_quant_mode"]] if r["moe_quant_mode"] else None,
                    system=r["system"], num_gpus_per_node=8)
                model = get_model(r["model_path"], mc, r["backend"])
                rc = config.RuntimeConfig(batch_size=int(r["batch_size"]), isl=int(r["isl"]), osl=int(r["osl"]))
                summary = get_backend(r["backend"]).run_static(model, dbs[db_key], rc, mode="static_gen", stride=32)
                seen[key] = sum(summary.get_generation_latency_dict().values()) / int(r["osl"])
            except Exception:  # a model config not shipped, a table it lacks, a layout it refuses: not compared
                pass
        if seen[key] is not None:
            out[line] = seen[key]
    return out


def _ours(rows: list[dict]) -> dict[str, tuple[float, object]]:
    """perfmodel's static decode TPOT (ms) and model for each silicon row it projects (the validation's layout of
    the row, :func:`perfmodel.validate.row_layout`, at the row's batch with static batching)."""
    from perfmodel.errors import InputError
    from perfmodel.projection import project_resolved
    from perfmodel.resolve import resolve_hardware, resolve_model, setup
    from perfmodel.scenario import Scenario
    from perfmodel.validate import engine_of, release_settings, row_layout

    out: dict[str, tuple[float, object]] = {}
    profiles: dict[tuple, object] = {}
    for r in rows:
        try:
            hw, model = resolve_hardware(r["hardware"].strip()), resolve_model(r["model"].strip())
            engine = engine_of(r, "auto")
            if (hw.key, engine) not in profiles:
                profiles[(hw.key, engine)] = setup(hw, engine=engine).profile
            sc = Scenario(batch=int(r["batch"]), **row_layout(r, str(SILICON), model), engine=engine,
                          **release_settings(r, engine), batching="static", api_servers=0).validated()
            s = setup(hw, model, sc, profiles[(hw.key, engine)])
            out[r["id"]] = (project_resolved(s.hardware, s.model, s.scenario, s.profile).tpot_s * 1e3, model)
        except InputError:  # a layout or format the model refuses: not compared
            pass
    return out


def compared() -> list[Row]:
    """Every aggregated TPOT row both tools price."""
    with open(SILICON, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["metric"] == "tpot" and (r["mode"] or "agg") == "agg"
                and r["batch"] and r["concurrency"]]
    line_of = {r["id"]: int(m.group(1)) for r in rows if (m := re.search(r"silicon_sample\.csv:(\d+)", r["source"]))}
    rows = [r for r in rows if r["id"] in line_of]
    aic = _aic_estimates(_sample_rows(), set(line_of.values()))
    rows = [r for r in rows if line_of[r["id"]] in aic]
    ours = _ours(rows)
    return [Row(r["id"], line_of[r["id"]], r["model"], ours[r["id"]][1].family, ours[r["id"]][1].layers,
                (r.get("engine") or "").strip().lower(), r["hardware"], int(r["tp"]), int(r["concurrency"]),
                int(r["osl"]), float(r["value"]), aic[line_of[r["id"]]], ours[r["id"]][0],
                int(float(r.get("moe_ep") or 1)))
            for r in rows if r["id"] in ours]


def _err(x: list[float]) -> str:
    return f"{statistics.median(abs(v) for v in x) * 100:.1f}% ({statistics.median(x) * 100:+.1f}%)"


def error_table(data: list[Row]) -> str:
    groups: dict[tuple, list[Row]] = defaultdict(list)
    for r in data:
        groups[(r.family, r.engine)].append(r)
        groups[("all", "")].append(r)
    lines = ["| family | engine | rows | aiconfigurator static decode: median \\|error\\| (signed) | "
             "perfmodel static decode | perfmodel / aiconfigurator, median |", "|---|---|---|---|---|---|"]
    for (fam, eng), rs in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        aic = [r.aic_ms / r.measured_ms - 1 for r in rs]
        ours = [r.ours_ms / r.measured_ms - 1 for r in rs]
        ratio = statistics.median(r.ours_ms / r.aic_ms for r in rs)
        lines.append(f"| {fam} | {ENGINES.get(eng, eng)} | {len(rs):,} | {_err(aic)} | {_err(ours)} | {ratio:.2f} |")
    return "\n".join(lines)


def gap_table(data: list[Row]) -> str:
    cells: dict[tuple, dict[int, tuple[list, list]]] = defaultdict(lambda: defaultdict(lambda: ([], [])))
    for r in data:
        if r.concurrency <= LOW_CONCURRENCY and r.osl >= LONG_OUTPUT and r.tp in TPS:
            a, o = cells[(r.model, ENGINES.get(r.engine, r.engine), r.hardware)][r.tp]
            a.append((r.measured_ms - r.aic_ms) / r.layers * 1e3)
            o.append((r.measured_ms - r.ours_ms) / r.layers * 1e3)
    head = " | ".join(f"TP {tp}" for tp in TPS)
    lines = [f"| model | engine | part | {head} |", "|---|---|---|" + "---|" * len(TPS)]
    for key in sorted(cells):
        row = []
        for tp in TPS:
            a, o = cells[key].get(tp, ([], []))
            row.append(f"{statistics.median(a):+.0f} / {statistics.median(o):+.0f}" if a else "")
        if sum(bool(c) for c in row) >= 2:
            lines.append(f"| {' | '.join(key)} | {' | '.join(row)} |")
    return "\n".join(lines)


def ep_table(data: list[Row]) -> str:
    """Per MoE family and engine with rows both ways, the signed median error of each estimate with the experts
    split over the MoE ranks (EP 1) and spread over them (EP > 1): what both miss alike at EP > 1 is time the
    kernel tables do not hold."""
    cells: dict[tuple, dict[bool, list[Row]]] = defaultdict(lambda: defaultdict(list))
    for r in data:
        cells[(r.family, ENGINES.get(r.engine, r.engine))][r.moe_ep > 1].append(r)
    lines = ["| family | engine | EP 1: rows | aiconfigurator | perfmodel | EP > 1: rows | aiconfigurator | perfmodel |",
             "|---|---|---|---|---|---|---|---|"]
    for key in sorted(cells):
        if len(cells[key]) < 2:
            continue
        row = []
        for spread in (False, True):
            rs = cells[key][spread]
            aic = statistics.median(r.aic_ms / r.measured_ms - 1 for r in rs) * 100
            ours = statistics.median(r.ours_ms / r.measured_ms - 1 for r in rs) * 100
            row += [f"{len(rs):,}", f"{aic:+.1f}%", f"{ours:+.1f}%"]
        lines.append(f"| {' | '.join(key)} | {' | '.join(row)} |")
    return "\n".join(lines)


def prologue_table(m: int = 8, k: int = 5120) -> str:
    """Each imported engine folder's fitted input quantization of a linear module (what its table times inside the
    module, its own profile) beside the quantize op a projection on that part and engine adds before the same
    product (the composed profile a projection takes), both alone in a stream."""
    from perfmodel import ops as O
    from perfmodel.cost import time_op
    from perfmodel.cost.gemm import quant_prologue
    from perfmodel.cost.tables import load_folder
    from perfmodel.profile import load_profile
    from perfmodel.resolve import resolve_hardware, setup

    lines = ["| calibration folder | format | module's fitted quantization (us) | projection's quantize op (us) |",
             "|---|---|---|---|"]
    for path in sorted(p for p in (ROOT / "calibration").iterdir() if p.is_dir()):
        folder = load_folder(path)
        if folder is None:  # not an imported engine folder
            continue
        hw, own = resolve_hardware(folder.part), load_profile(path)
        projected = setup(hw, engine=folder.engine).profile
        for fmt in sorted(own.gemm_prologue_s):
            dtype = "fp4" if fmt == "fp4" else "fp8"
            fitted = quant_prologue(m, k, fmt, dtype, hw.hbm_bandwidth, own)
            op = time_op(O.quantize("q", m, k, dtype, phase="decode"), hw, projected).time
            lines.append(f"| {path.name} | {fmt} | {fitted * 1e6:.1f} | {op * 1e6:.1f} |")
    return "\n".join(lines)


def markdown() -> str:
    data = compared()
    return (f"Rows both tools price: {len(data):,} (aiconfigurator-core 0.12.0).\n\n{error_table(data)}\n\n"
            f"Measured TPOT beyond each estimate, in microseconds per layer per decode step (aiconfigurator / "
            f"perfmodel; median over the rows at <= {LOW_CONCURRENCY} clients and >= {LONG_OUTPUT} output tokens; "
            f"models with at least two TP degrees):\n\n{gap_table(data)}\n\n"
            f"Signed median error of each static decode by expert parallelism, for the families measured both ways "
            f"(EP 1: each expert split over the MoE ranks; EP > 1: the experts spread over them):\n\n{ep_table(data)}"
            f"\n\n"
            f"A linear module's input quantization at 8 rows of 5,120 (a decode step's): as each engine's fitted "
            f"table prices it inside the module, and as a projection prices the quantize op it adds before the "
            f"product:\n\n{prologue_table()}")


if __name__ == "__main__":
    print(markdown())
