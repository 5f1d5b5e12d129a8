"""Training rows of a validation table (kind ``training``): the scenario each describes, predicted.

A row gives the model, hardware, GPU count, TP, PP, precision, sequence (``isl``), global batch (``batch``),
the metric and the published value. What a row leaves out comes from the software its source ran, as a
named preset (each setting with its reason), never from the row's figure:

- ``megatron-2021`` (Narayanan et al. 2021, Megatron-LM on DGX A100): attention unfused (FlashAttention did
  not exist yet: Dao et al. 2022), hidden and attention dropout 0.1 (Megatron's GPT defaults), full
  activation recomputation (the paper's appendix counts "an additional forward pass"), the local DDP that
  all-reduces fp32 gradients after the backward (no overlap), no sequence parallelism (Korthikanti et al.
  2022 came later), no distributed optimizer (ZeRO 0), the non-interleaved 1F1B schedule and micro-batch 1
  (Table 1 gives neither; both assumed).
- ``llama3`` (Llama 3 paper, section 3.3): flash attention, no dropout, sequence parallelism with TP,
  gradients accumulated over the micro-batches in fp32 and reduce-scattered in fp32 once a step with the
  optimizer states sharded (section 3.3.2, numerical stability; Megatron's distributed optimizer: ZeRO 1),
  the gradient reduce overlapped, micro-batch 1, 126 layers over 16 stages as the paper balances them (one layer fewer on the
  first and the last stage). The paper's tuned pipeline schedule and memory settings are not given as
  numbers: the interleaving depth and the recompute are the fastest the tool finds that fit in memory
  (Meta tuned its configuration; the tool's own search stands for that tuning, never the published figure).

**Metric definitions follow the source.** Narayanan et al. 2021 count FLOPs with the recomputed forward
(their appendix: ``96 B s l h^2 (1 + s / 6h + V / 16 l h)``, four passes), so their "teraFLOP/s per GPU" is
this tool's ``hardware_tflops_per_gpu``; every other source's ``model_tflops_per_gpu`` is the model-FLOPs
figure. ``step_time_s`` and ``memory_bytes`` (the fullest GPU's total) are compared directly.
"""
from __future__ import annotations

from ..errors import InputError
from .scenario import TrainScenario

TRAIN_METRICS = ("model_tflops_per_gpu", "hardware_tflops_per_gpu", "step_time_s", "tokens_per_s", "mfu",
                 "memory_bytes")

PRESETS = {
    "megatron-2021": dict(attention="unfused", dropout=True, recompute="full", dp_overlap=False,
                          sequence_parallel=False, zero=0, schedule="1f1b", micro_batch=1, grad_dtype="fp32"),
    "llama3": dict(attention="flash", dropout=False, dp_overlap=True, zero=1, micro_batch=1, grad_dtype="fp32"),
    "default": dict(micro_batch=1),
}


def preset_for(row: dict) -> str:
    src = (row.get("source") or "").lower()
    if "narayanan" in src or "2104.04473" in src:
        return "megatron-2021"
    if "llama 3" in src or "2407.21783" in src:
        return "llama3"
    return "default"


def _int(row: dict, col: str, default: int | None = None) -> int:
    v = row.get(col)
    if (v is None or str(v).strip() == "") and default is not None:
        return default
    try:
        return int(float(v))
    except (TypeError, ValueError):
        raise InputError(f"expected an integer, got {v!r}", field=col) from None


def scenario_for(row: dict, model) -> TrainScenario:
    """The training scenario a validation row describes (module doc: presets)."""
    preset = preset_for(row)
    kw = dict(PRESETS[preset])
    tp, pp = _int(row, "tp", 1), _int(row, "pp", 1)
    gpus = _int(row, "gpus")
    precision = (row.get("precision") or "bf16").strip().lower()
    base = TrainScenario(gpus=gpus, tp=tp, pp=pp, global_batch=_int(row, "batch"), seq=_int(row, "isl"),
                         dtype=precision, **kw)
    if preset == "llama3":
        base = base.with_(sequence_parallel=tp > 1)
    return base


def tuned(ts: TrainScenario, model, hw, prof) -> TrainScenario:
    """The fastest interleaving depth and recompute that fit (for a preset whose source does not give them)."""
    from .memory import memory, stage_layers
    from .project import project_training

    per = max(stage_layers(model, ts))
    depths = [1] + ([v for v in range(2, per + 1) if ts.micro_batches % ts.pp == 0] if ts.pp > 1 else [])
    best = None
    for v in depths:
        for rec in ("none", "selective", "full"):
            trial = ts.with_(schedule="interleaved" if v > 1 else "1f1b", interleave=v, recompute=rec)
            try:
                trial = trial.validated(model)
            except InputError:
                continue
            if not memory(model, trial, hw.hbm_visible_bytes).fits:
                continue
            t = project_training(hw, model, trial, prof).step_time_s
            if best is None or t < best[0]:
                best = (t, trial)
            break  # more recompute is never faster at the same depth
    return best[1] if best else ts


def predict_row(row: dict, calibration=None):
    """(the projection, the scenario) for a training row."""
    from ..resolve import resolve_hardware, resolve_model, resolve_profile
    from .project import project_training

    hw = resolve_hardware(row["hardware"])
    model = resolve_model(row["model"])
    prof = resolve_profile(calibration, hw, "torch")
    ts = scenario_for(row, model)
    if preset_for(row) == "llama3":
        ts = tuned(ts, model, hw, prof)
    return project_training(hw, model, ts.validated(model), prof), ts


def metric_value(proj, metric: str, row: dict) -> float:
    if metric == "model_tflops_per_gpu":
        if preset_for(row) == "megatron-2021":
            return proj.hardware_tflops_per_gpu  # the paper's FLOP count includes the recomputed forward
        return proj.model_tflops_per_gpu
    if metric == "hardware_tflops_per_gpu":
        return proj.hardware_tflops_per_gpu
    if metric == "step_time_s":
        return proj.step_time_s
    if metric == "tokens_per_s":
        return proj.tokens_per_s
    if metric == "mfu":
        return proj.mfu
    if metric == "memory_bytes":
        return proj.memory.total
    raise InputError(f"training metric {metric!r} not projected; expected one of {', '.join(TRAIN_METRICS)}",
                     field="metric")


def training_value(row: dict, calibration=None) -> tuple[float, str]:
    """The predicted value of a ``training`` validation row and the calibration label it used."""
    proj, _ = predict_row(row, calibration)
    return float(metric_value(proj, row["metric"], row)), proj.profile.label


def run_training_validation(paths, calibration=None) -> list[dict]:
    """Rows of kind ``training`` from each CSV, predicted (same record shape as perfmodel.validate)."""
    from pathlib import Path

    from ..io import csv_dict_rows

    out = []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            raise InputError("no such file", file=str(p))
        for i, row in enumerate(csv_dict_rows(p.read_text(encoding="utf-8-sig"), file=str(p)), start=2):
            if row.get("kind") != "training":
                continue
            rec = {"id": row["id"], "kind": "training", "hardware": row["hardware"], "model": row["model"],
                   "metric": row["metric"], "unit": row.get("unit", ""), "published": float(row["value"]),
                   "predicted": None, "error": None, "status": "ok", "calibration": None,
                   "source": row.get("source", "")}
            try:
                value, label = training_value(row, calibration)
            except InputError as e:
                rec["status"] = f"{p}:{i}: {e}"
                out.append(rec)
                continue
            rec.update(predicted=value, error=value / rec["published"] - 1.0, calibration=label)
            out.append(rec)
    return out


def default_tables() -> list:
    from ..paths import repo_root, workloads_dir

    # the table the package ships (workloads/validation/, found by perfmodel.paths in a checkout and in an
    # installed package alike); the shared reference copy beside a checkout only when that is missing
    out = []
    for cand in (workloads_dir() / "validation" / "public_validation.csv",
                 repo_root().parent / "shared" / "reference" / "public_validation.csv",
                 repo_root() / "shared" / "reference" / "public_validation.csv"):
        if cand.is_file():
            out.append(cand)
            break
    extra = workloads_dir() / "validation" / "training_public.csv"
    if extra.is_file():
        out.append(extra)
    if not out:
        raise InputError(f"no validation table found (looked in {workloads_dir() / 'validation'}); pass --csv FILE",
                         field="--csv")
    return out


def with_training_rows(path, calibration=None):
    """The profile (``calibration``, or the measured part's own) with training factors fitted from ``path``."""
    import json
    from pathlib import Path

    from ..measure.store import read_rows
    from ..resolve import resolve_hardware, resolve_profile
    from ..fit.training import fit_training

    p = Path(path)
    if not p.is_file():
        raise InputError("no such file", file=str(p))
    rows = read_rows(p)
    env_file = p.with_name("environment.json")
    device = ""
    if env_file.is_file():
        device = str(json.loads(env_file.read_text()).get("env", {}).get("device_name", ""))
    from ..fit.directory import match_spec

    hw = match_spec({"device_name": device}, None) if device else resolve_hardware("h200-sxm")
    prof, _ = fit_training(resolve_profile(calibration, hw, "torch"), rows, hw)
    return prof


def main(argv: list[str] | None = None, *, table=None) -> int:
    """``python -m perfmodel.train.validate [--csv FILE ...] [--calibration DIR|none]``: the training rows'
    table with the median absolute error. ``table`` formats the rows (the program passes
    :func:`perfmodel.validate.validation_table`: this module sits below the validation command, which imports it)."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m perfmodel.train.validate")
    ap.add_argument("--csv", action="append", default=None, help="validation table(s) (default: the shared table "
                                                                   "and workloads/validation/training_public.csv)")
    ap.add_argument("--calibration", default=None, help="profile folder or profile.json; 'none' for defaults")
    ap.add_argument("--training-rows", default=None, metavar="MEASUREMENTS.jsonl",
                    help="fit the training factors from these train_kernel rows first (on the profile of the "
                         "part they were measured on, then carried like the rest of the profile)")
    args = ap.parse_args(argv)
    try:
        calibration = args.calibration
        if args.training_rows:
            calibration = with_training_rows(args.training_rows, args.calibration)
        tables = args.csv or default_tables()
        rows = run_training_validation(tables, calibration)
        if not rows:
            raise InputError("no training rows (kind = training) in " + ", ".join(str(t) for t in tables),
                             field="--csv")
    except InputError as e:
        print(f"perfmodel: error: {e}", file=sys.stderr)
        return 2
    print(table(rows))
    return 0


if __name__ == "__main__":
    from ..validate import validation_table  # the program sits above every layer

    raise SystemExit(main(table=validation_table))
