"""Training projections as a dict (JSON), a flat row (CSV) and a text table. Seconds and bytes throughout."""
from __future__ import annotations

import math
from dataclasses import asdict

from .. import __version__
from ..serialize import calibration_info, hardware_info
from ..units import format_si
from .project import TimedOp, TrainProjection

DEFINITIONS = {
    "step_time_s": "one optimizer step: pipeline of all micro-batches, exposed gradient reduce, optimizer",
    "tokens_per_s": "global_batch x seq / step_time_s, all GPUs",
    "model_tflops_per_gpu": "Megatron definition (Narayanan et al. 2021): 3 x forward matmul FLOPs, attention over "
                            "the whole sequence, LM head included (6 x params x tokens + attention), per GPU per s",
    "hardware_tflops_per_gpu": "model FLOPs plus the recomputed forward, per GPU per second",
    "mfu": "model_tflops_per_gpu / dense peak of the GEMM format",
    "bubble_fraction": "share of the step the slowest pipeline stage waits",
    "exposed_comm_s": "communication on the critical path per step, after overlap",
    "memory": "bytes on the fullest GPU",
}


def _num(x: float) -> float:
    x = float(x)
    return x if math.isfinite(x) else 0.0


def op_row(x: TimedOp) -> dict:
    op = x.top.op
    return {"name": op.name, "pass": x.top.pass_, "role": x.top.role, "kind": op.kind, "count": _num(op.count),
            "flops": _num(op.flops), "bytes": _num(op.bytes), "model_flops": _num(x.top.model_flops),
            "time_s": _num(x.time), "exposed_s": _num(x.exposed), "total_s": _num(x.total), "bound": x.bound}


def scenario_dict(p: TrainProjection) -> dict:
    sc = asdict(p.scenario)
    sc["dp"] = p.scenario.data_parallel
    sc["micro_batches"] = p.scenario.micro_batches
    sc["tokens_per_step"] = p.scenario.tokens_per_step
    return sc


def train_dict(p: TrainProjection) -> dict:
    mem = p.memory.as_dict()
    return {
        "tool": f"perfmodel {__version__}",
        "arch": hardware_info(p.hardware),
        "model": {"key": p.model.key, "name": p.model.name, "params": p.model.param_count()},
        "scenario": scenario_dict(p),
        "step_time_s": _num(p.step_time_s),
        "tokens_per_s": _num(p.tokens_per_s),
        "tokens_per_s_per_gpu": _num(p.tokens_per_s_per_gpu),
        "model_tflops_per_gpu": _num(p.model_tflops_per_gpu),
        "hardware_tflops_per_gpu": _num(p.hardware_tflops_per_gpu),
        "mfu": _num(p.mfu),
        "hfu": _num(p.hfu),
        "bubble_fraction": _num(p.bubble_fraction),
        "exposed_comm_s": _num(p.exposed_comm_s),
        "memory": {k: (v if isinstance(v, bool) else _num(v)) for k, v in mem.items()},
        "breakdown_s": {k: _num(v) for k, v in p.breakdown.items()},
        "stages": [{"stage": k, "forward_s": _num(s.forward), "backward_s": _num(s.backward),
                    "weight_grad_s": _num(s.weight_grad)} for k, s in enumerate(p.stages)],
        "slowest_stage": p.slowest_stage,
        "ops": [op_row(x) for x in p.ops],
        "definitions": DEFINITIONS,
        "calibration": calibration_info(p.profile),
        "assumptions": list(p.assumptions),
    }


CSV_FIELDS = ("arch", "model", "gpus", "tp", "pp", "cp", "ep", "dp", "global_batch", "micro_batch", "seq",
              "schedule", "interleave", "recompute", "sequence_parallel", "zero", "dtype", "optimizer",
              "step_time_s", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu",
              "bubble_fraction", "exposed_comm_s", "memory_total_bytes", "memory_fits", "calibration")


def csv_row(p: TrainProjection) -> dict:
    s = p.scenario
    return {"arch": p.hardware.key, "model": p.model.key, "gpus": s.gpus, "tp": s.tp, "pp": s.pp, "cp": s.cp,
            "ep": s.ep, "dp": s.data_parallel, "global_batch": s.global_batch, "micro_batch": s.micro_batch,
            "seq": s.seq, "schedule": s.schedule, "interleave": s.chunks, "recompute": s.recompute,
            "sequence_parallel": s.sequence_parallel, "zero": s.zero, "dtype": s.dtype, "optimizer": s.optimizer,
            "step_time_s": _num(p.step_time_s), "tokens_per_s": _num(p.tokens_per_s),
            "model_tflops_per_gpu": _num(p.model_tflops_per_gpu),
            "hardware_tflops_per_gpu": _num(p.hardware_tflops_per_gpu), "mfu": _num(p.mfu),
            "bubble_fraction": _num(p.bubble_fraction), "exposed_comm_s": _num(p.exposed_comm_s),
            "memory_total_bytes": _num(p.memory.total), "memory_fits": p.memory.fits,
            "calibration": p.profile.label}


def layout(s) -> str:
    parts = [f"TP {s.tp}", f"PP {s.pp}"]
    if s.cp > 1:
        parts.append(f"CP {s.cp}")
    if s.ep > 1:
        parts.append(f"EP {s.ep}")
    parts.append(f"DP {s.data_parallel}")
    return ", ".join(parts)


def seconds_text(x: float) -> str:
    x = float(x)
    if x >= 1:
        return f"{x:.3f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.3g} ms"
    return f"{x * 1e6:.3g} us"


def train_table(p: TrainProjection, *, verbose: bool = False) -> str:
    s = p.scenario
    m = p.memory
    sched = s.schedule + (f" (v={s.chunks})" if s.chunks > 1 else "")
    lines = [
        f"{p.model.name} training on {s.gpus} x {p.hardware.name}  ({layout(s)}; {s.dtype}, {s.optimizer}, "
        f"ZeRO {s.zero})",
        f"scenario: global batch {s.global_batch} x seq {s.seq}, micro-batch {s.micro_batch} "
        f"({s.micro_batches} per pipeline), {sched}, recompute {s.recompute}"
        + (", sequence parallel" if s.sequence_parallel else ""),
        f"calibration: {p.profile.label}",
        "",
        f"  step time                     {seconds_text(p.step_time_s)}",
        f"  tokens/s                      {p.tokens_per_s:,.0f}  ({p.tokens_per_s_per_gpu:,.0f} per GPU)",
        f"  model TFLOP/s per GPU         {p.model_tflops_per_gpu:.1f}  (MFU {p.mfu:.1%})",
        f"  hardware TFLOP/s per GPU      {p.hardware_tflops_per_gpu:.1f}  (with recompute; HFU {p.hfu:.1%})",
        f"  pipeline bubble               {p.bubble_fraction:.1%} of the step",
        f"  exposed communication         {seconds_text(p.exposed_comm_s)} per step",
        "",
        "  step time by part:",
    ]
    for k, v in p.breakdown.items():
        if v > 0:
            lines.append(f"    {k:<48}{seconds_text(v):>12}  {v / p.step_time_s:6.1%}")
    lines += [
        "",
        f"  memory per GPU (stage {m.stage}): weights {format_si(m.weights, 'B')}, gradients "
        f"{format_si(m.gradients, 'B')}, optimizer states {format_si(m.optimizer_states, 'B')}, activations "
        f"{format_si(m.activations, 'B')} (+{format_si(m.activation_working, 'B')} working), reserve "
        f"{format_si(m.reserve, 'B')}",
        f"  total {format_si(m.total, 'B')} of {format_si(m.capacity, 'B')} usable: "
        + ("fits" if m.fits else "DOES NOT FIT"),
    ]
    ops = p.ops if verbose else sorted(p.ops, key=lambda x: -x.total)[:12]
    lines += ["", f"  {'operator' if verbose else 'largest operators'} (stage {p.slowest_stage}, per micro-batch; "
                  "step ops once)",
              f"    {'name':<34}{'pass':<10}{'kind':<15}{'count':>7}{'one run':>11}{'total':>11}  bound"]
    for x in ops:
        lines.append(f"    {x.top.name:<34}{x.top.pass_:<10}{x.top.op.kind:<15}{x.count:>7.4g}{seconds_text(x.time):>11}"
                     f"{seconds_text(x.total):>11}  {x.bound}")
    lines += ["", "  assumptions:"] + [f"    - {a}" for a in p.assumptions]
    return "\n".join(lines)


def search_table(results: list[TrainProjection], gpus: int, considered: int) -> str:
    if not results:
        return f"no layout of {gpus} GPUs fits ({considered} considered)"
    p0 = results[0]
    lines = [f"{p0.model.name} on {gpus} x {p0.hardware.name}: fastest layouts that fit ({considered} considered), "
             f"global batch {p0.scenario.global_batch} x seq {p0.scenario.seq}", "",
             f"  {'#':>2} {'layout':<30}{'mb':>4} {'schedule':<16}{'recompute':<11}{'step':>10}{'MFU':>7}"
             f"{'TFLOP/s':>9}{'bubble':>8}{'memory':>10}"]
    for i, p in enumerate(results, 1):
        s = p.scenario
        sched = s.schedule + (f" v={s.chunks}" if s.chunks > 1 else "")
        lay = layout(s) + (", SP" if s.sequence_parallel else "")
        lines.append(f"  {i:>2} {lay:<30}{s.micro_batch:>4} {sched:<16}{s.recompute:<11}{seconds_text(p.step_time_s):>10}"
                     f"{p.mfu:>7.1%}{p.model_tflops_per_gpu:>9.1f}{p.bubble_fraction:>8.1%}"
                     f"{format_si(p.memory.total, 'B'):>10}")
    return "\n".join(lines)
