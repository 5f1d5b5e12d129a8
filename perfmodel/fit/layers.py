"""Whole decoder layers measured by the suite (``perfmodel.measure.layers``): predicted as the projection times
them, never fitted; their error is reported beside the kernels'."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..graph import Step
from ..models import Model
from ..profile import Profile
from ..projection import evaluate_step
from ..resolve import resolve_scenario
from ..scenario import Scenario
from ..spec import HardwareSpec
from .latency import error_summary


def layer_model(params: dict) -> Model:
    return Model(key=str(params.get("model", "layer")), name=str(params.get("model", "layer")), family="llama",
                 hidden=int(params["hidden"]), layers=1, heads=int(params["heads"]), kv_heads=int(params["kv_heads"]),
                 head_dim=int(params["head_dim"]), intermediate=int(params["intermediate"]), vocab=32000)


def layer_scenario(params: dict) -> Scenario:
    """The scenario a measured layer row ran under: plain PyTorch, launched eagerly or replayed from a graph."""
    dt = params.get("dtype", "bf16")
    return Scenario(tp=int(params.get("tp", 1)), dtype=dt, act_dtype=dt, kv_dtype=dt,
                    launch="graph" if params.get("graph") else "eager", kernels="torch")


def layer_step(params: dict) -> Step:
    if params["phase"] == "prefill":
        return Step("prefill", int(params["batch"]), int(params["seq"]), 0)
    return Step("decode", int(params["batch"]), 1, int(params["context"]))


def predict_layer(params: dict, hw: HardwareSpec, prof: Profile) -> float:
    """A measured decoder layer (one TP shard, no all-reduce) as the projection would time it: the shares of the
    step (perfmodel.step_accounting) of its layer's ops other than collectives."""
    sc = resolve_scenario(layer_scenario(params), hw, None)  # a layer alone: no model
    acc = evaluate_step(layer_model(params), hw, sc, prof, layer_step(params)).account
    return float(acc.total([s.op.scope == "layer" and not s.collective for s in acc.ops]))


def validate_layers(layers: list[dict], hw: HardwareSpec, prof: Profile) -> tuple[dict, list[dict]]:
    rows = []
    for r in layers:
        try:
            pred = predict_layer(r["params"], hw, prof)
        except (KeyError, ValueError, InputError):
            continue
        rows.append({"id": r["id"], "phase": r["params"]["phase"], "graph": bool(r["params"].get("graph")),
                     "measured_s": float(r["time_s"]), "predicted_s": pred, "error": pred / float(r["time_s"]) - 1.0})
    summary = {}
    for phase in ("prefill", "decode"):
        sel = [x for x in rows if x["phase"] == phase]
        if sel:
            summary[phase] = error_summary(np.array([x["predicted_s"] for x in sel]), np.array([x["measured_s"] for x in sel]))
    return summary, rows
