"""A training step: its time, tokens/s, model and hardware TFLOP/s per GPU, MFU, bubble, exposed comm, memory.

Definitions (docs/training.md has them with their references):

- **Step time**: one optimizer step of ``global_batch`` sequences: the pipeline of ``m`` micro-batches
  (:mod:`.schedule`), then the exposed part of the gradient reduce (and parameter all-gather), the
  tied-embedding gradient sync between the first and last stage, and the optimizer step.
- **Per micro-batch, per stage**: the sum of its operators' times (:mod:`.graph`, :mod:`.cost`), forward,
  recompute and backward, each collective counted for its *exposed* part: TP collectives are exposed
  unless ``tp_overlap`` hides a share of them (TransformerEngine's userbuffer overlap); context-parallel
  K/V exchanges hide under the attention they feed; sequence-parallel re-gathers hide under the
  data-gradient GEMM; ZeRO-2/3 gathers and reduce-scatters under the layer's compute; expert all-to-alls
  and pipeline sends are exposed. With ``dp_overlap`` the gradient reduce hides under the first stage's last
  backward and the parameter gather under its first forward (Megatron's --overlap-grad-reduce and
  --overlap-param-gather); without it both are exposed.
- **Model FLOPs** (the Megatron definition, Narayanan et al. 2021, appendix): ``3 x`` the forward's matrix
  products, attention counted over the whole sequence (no causal saving), the LM head included; for a dense
  model ``6 x parameters x tokens`` plus attention. **Hardware FLOPs** add the recomputed forward.
  ``model_tflops_per_gpu = model FLOPs / (step time x gpus)``; ``mfu`` divides that by the dense peak of the
  GEMM format (bf16/fp16: the BF16 rate; fp8: the FP8 rate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..errors import InputError

from ..cost import demand_parts, matmul_rate
from ..models import Model
from ..ops import collective as collective_op
from ..ops import Op
from ..profile import DEFAULTS, Profile
from ..spec import HardwareSpec
from . import graph as G
from . import memory as M
from .cost import time_train_op, training_params
from .graph import TrainOp
from .scenario import TrainScenario, resolve_dispatcher
from .schedule import PipelineTime, StageTime, pipeline_time


@dataclass
class TimedOp:
    top: TrainOp
    time: float  # one run, seconds
    exposed: float  # one run's time on the critical path (collectives after overlap)
    bound: str

    @property
    def count(self) -> float:
        return float(self.top.op.count)

    @property
    def total(self) -> float:
        return self.exposed * self.count

    def counted(self, n: float) -> "TimedOp":
        return TimedOp(self.top.counted(n), self.time, self.exposed, self.bound)


@dataclass
class TrainProjection:
    hardware: HardwareSpec
    model: Model
    scenario: TrainScenario
    profile: Profile
    step_time_s: float
    tokens_per_s: float
    model_flops: float  # per step, all GPUs
    hardware_flops: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    hfu: float
    bubble_fraction: float
    exposed_comm_s: float
    memory: M.TrainMemory
    pipeline: PipelineTime
    stages: list[StageTime]
    slowest_stage: int
    ops: list[TimedOp]  # the slowest stage's ops per micro-batch, then the once-per-step ops
    breakdown: dict[str, float]  # seconds of the step by part
    assumptions: list[str] = field(default_factory=list)

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.scenario.gpus


# ---------------------------------------------------------------------------------------------------------
# timing blocks of ops
# ---------------------------------------------------------------------------------------------------------


def _time_block(ops: list[TrainOp], hw, prof, params, ts: TrainScenario, sustained) -> list[TimedOp]:
    timed = []
    for t in ops:
        sec, bound = time_train_op(t, hw, prof, params, mode=ts.mode, sustained=sustained)
        timed.append(TimedOp(t, sec, sec, bound))
    return _overlap(timed, ts)


def _overlap(timed: list[TimedOp], ts: TrainScenario) -> list[TimedOp]:
    """Exposed time of each collective: a TP share hidden by ``tp_overlap``; one that overlaps named ops of
    its pass (or every compute op of it: ``"*"``) shows only what exceeds them."""
    by_name: dict[str, float] = {}
    compute_by_pass: dict[str, float] = {}
    for x in timed:
        if x.top.is_comm:
            continue
        by_name[x.top.name] = by_name.get(x.top.name, 0.0) + x.time * x.count
        compute_by_pass[x.top.pass_] = compute_by_pass.get(x.top.pass_, 0.0) + x.time * x.count
    for x in timed:
        t = x.top
        if not t.is_comm:
            continue
        if t.hide_under:
            if t.hide_under == ("*",):
                cover = compute_by_pass.get(t.pass_, 0.0)
            else:
                cover = sum(by_name.get(n, 0.0) for n in t.hide_under)
            whole = x.time * x.count
            x.exposed = max(0.0, whole - cover) / x.count if x.count else 0.0
        elif t.tp_comm:
            x.exposed = x.time * (1.0 - ts.tp_overlap)
    return timed


def _sum(timed: list[TimedOp], pass_: str | None = None, role: str | None = None, comm: bool | None = None) -> float:
    s = 0.0
    for x in timed:
        if pass_ is not None and x.top.pass_ != pass_:
            continue
        if role is not None and x.top.role != role:
            continue
        if comm is not None and x.top.is_comm != comm:
            continue
        s += x.total
    return s


# ---------------------------------------------------------------------------------------------------------
# per-layer communication that depends on ZeRO
# ---------------------------------------------------------------------------------------------------------


def _zero_layer_ops(model: Model, ts: TrainScenario) -> list[TrainOp]:
    """ZeRO-3 gathers each layer's weights in the forward and again in the backward; ZeRO-2 and 3
    reduce-scatter its gradients every micro-batch. All prefetched under the layer's compute."""
    if ts.zero < 2 or ts.data_parallel * ts.cp == 1:
        return []
    group = ts.data_parallel * ts.cp
    params = sum(M.layer_params(model, i, ts).total for i in range(model.layers)) / model.layers
    wb = 2.0 * params
    gb = G.O.bytes_per_element(ts.grad_dtype) * params
    out = []
    if ts.zero == 3:
        for pass_ in ("forward", "backward"):
            op = collective_op(f"zero3.allgather.{pass_}", "all_gather", wb, group, phase="prefill")
            out.append(TrainOp(op, pass_, "comm", hide_under=("*",), stride=ts.tp))
    op = collective_op("zero.reducescatter", "reduce_scatter", gb, group, phase="prefill")
    out.append(TrainOp(op, "backward", "comm", hide_under=("*",), stride=ts.tp))
    return out


# ---------------------------------------------------------------------------------------------------------
# FLOPs (layout-free: the Megatron definition over the whole model)
# ---------------------------------------------------------------------------------------------------------


def forward_model_flops(model: Model, ts: TrainScenario) -> tuple[float, float, float]:
    """(layers, attention core, LM head) forward FLOPs of one sequence, Megatron definition, whole model."""
    ref = ts.with_(tp=1, cp=1, ep=1, sequence_parallel=False, micro_batch=1, dp=None, gpus=1, pp=1,
                   schedule="1f1b", interleave=1)
    layer = G.layer_forward(model, ref)
    per_layer = sum(t.model_flops * t.op.count for t in layer)
    attn = sum(t.model_flops * t.op.count for t in layer if G.is_selective(t.name))
    head = sum(t.model_flops * t.op.count for t in G.head_forward(model, ref))
    # multi-token prediction (Megatron counts its modules too): a layer, the projection and the head per module
    mtp = G.mtp_modules(model, ts)
    proj = sum(t.model_flops * t.op.count for t in G.mtp_forward(model, ref))
    return per_layer * (model.layers + mtp), attn * (model.layers + mtp), head + mtp * (head + proj)


def step_flops(model: Model, ts: TrainScenario) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one step, all GPUs."""
    layers, attn, head = forward_model_flops(model, ts)
    seqs = ts.global_batch
    model_flops = 3.0 * (layers + head) * seqs
    extra = {"none": 0.0, "selective": attn, "full": layers}[ts.recompute]
    return model_flops, model_flops + extra * seqs


# ---------------------------------------------------------------------------------------------------------
# the projection
# ---------------------------------------------------------------------------------------------------------


def timed_blocks(hw: HardwareSpec, model: Model, ts: TrainScenario, prof: Profile, params: dict,
                 layers_per_stage: int) -> tuple[list[TimedOp], list[TimedOp], list[TimedOp]]:
    """Timed ops of one micro-batch: (one decoder layer, the embedding, the final norm + LM head + loss),
    forward, recompute and backward; the power-limited clock set by a stage of ``layers_per_stage`` layers."""
    layer_f = G.layer_forward(model, ts)
    zero_ops = _zero_layer_ops(model, ts)
    layer_b = G.backward(layer_f, ts) + [t for t in zero_ops if t.pass_ == "backward"]
    layer_f = layer_f + [t for t in zero_ops if t.pass_ == "forward"]
    layer_r = G.recompute(layer_f, ts)
    emb_f = G.embedding_forward(model, ts)
    emb_b = G.backward(emb_f, ts)
    head_f = G.head_forward(model, ts)
    head_b = G.head_backward(head_f, ts)
    compute_ops = [t.op for t in layer_f + layer_b + layer_r]
    sustained = None
    if ts.mode != "sol":  # the stage's power demand: its layers' and the head's, time-weighted
        num_l, den_l = demand_parts(compute_ops, hw, prof)
        num_h, den_h = demand_parts([t.op for t in head_f + head_b], hw, prof)
        sustained = (num_l * layers_per_stage + num_h) / max(den_l * layers_per_stage + den_h, 1e-12)
    layer_t = _time_block(layer_f + layer_r + layer_b, hw, prof, params, ts, sustained)
    emb_t = _time_block(emb_f + emb_b, hw, prof, params, ts, sustained)
    head_t = _time_block(head_f + head_b, hw, prof, params, ts, sustained)
    return layer_t, emb_t, head_t


def microbatch_time(hw: HardwareSpec, model: Model, ts: TrainScenario, prof: Profile, *,
                    embedding: bool = True, head: bool = True) -> float:
    """Forward + backward of one micro-batch through every layer on one GPU (no pipeline, no optimizer):
    what the suite's ``train_step`` measures."""
    ts = resolve_dispatcher(ts.validated(model), model, hw)
    params = training_params(prof)
    layer_t, emb_t, head_t = timed_blocks(hw, model, ts, prof, params, model.layers)
    total = model.layers * sum(x.total for x in layer_t)
    if embedding:
        total += sum(x.total for x in emb_t)
    if head:
        total += sum(x.total for x in head_t)
    return total


def check_part_runs(hw: HardwareSpec, ts: TrainScenario) -> None:
    """Refuse (one line) a format the part's tensor cores cannot run, as inference does: fp8 before Hopper and Ada,
    NVFP4 and the MXFP8 recipe's block-scaled products before Blackwell (they came with its fp4 tensor cores)."""
    if ts.dtype == "fp4" and "fp4" not in hw.tensor_flops:
        raise InputError(f"NVFP4 training needs fp4 tensor cores; {hw.name} has none (--dtype fp8 or bf16)",
                         field="--dtype")
    if ts.dtype == "fp8" and "fp8" not in hw.tensor_flops:
        raise InputError(f"fp8 training needs fp8 tensor cores; {hw.name} has none (--dtype bf16)", field="--dtype")
    if ts.dtype == "fp8" and ts.fp8_recipe == "mxfp8" and "fp4" not in hw.tensor_flops:
        raise InputError(f"the MXFP8 recipe needs block-scaled (MX) tensor cores, Blackwell's; {hw.name} has none "
                         "(--fp8-recipe delayed, tensorwise or block)", field="--fp8-recipe")


def project_training(hw: HardwareSpec, model: Model, ts: TrainScenario, prof: Profile) -> TrainProjection:
    asked_auto = ts.moe_dispatcher == "auto"
    ts = resolve_dispatcher(ts.validated(model), model, hw)
    auto = ts.recompute == "auto"
    if auto:  # the least recompute that fits; full (and its memory's verdict) where none does
        base = ts.with_(recompute="none")
        ts = M.least_recompute(model, base, hw) or base.with_(recompute="full")
    check_part_runs(hw, ts)
    params = training_params(prof)
    layers = M.stage_layers(model, ts)
    p, m, v = ts.pp, ts.micro_batches, ts.chunks

    layer_t, emb_t, head_t = timed_blocks(hw, model, ts, prof, params, max(layers))
    n_mtp = G.mtp_modules(model, ts)
    # each MTP module on the last stage: a decoder layer (timed as the mean layer), its own embedding, norms and
    # projection, and the LM head and loss again
    mtp_t = []
    if n_mtp:
        extra = G.mtp_forward(model, ts)
        extra_t = _time_block(extra + G.backward(extra, ts), hw, prof, params, ts, None)
        mtp_t = [_renamed(x, "mtp.", n_mtp) for x in layer_t + head_t] + [x.counted(n_mtp) for x in extra_t]

    lf, lr, lb = _sum(layer_t, "forward"), _sum(layer_t, "recompute"), _sum(layer_t, "backward")
    lw = _sum(layer_t, "backward", "wgrad")
    tail_f = _sum(head_t, "forward") + _sum(mtp_t, "forward")
    tail_b = _sum(head_t, "backward") + _sum(mtp_t, "backward") + _sum(mtp_t, "recompute")
    tail_w = _sum(head_t, "backward", "wgrad") + _sum(mtp_t, "backward", "wgrad")
    if p > 1:
        even = balanced_layers(model.layers, p, lf + lb + lr, _sum(emb_t), tail_f + tail_b, layers)
        # a layout is tuned within memory: keep Megatron's split where the balanced one would not fit and it does
        hbm = hw.hbm_visible_bytes
        if even != layers and (M.memory(model, ts, hbm, even).fits or not M.memory(model, ts, hbm, layers).fits):
            layers = even
    p2p_t = _p2p_time(model, ts, hw, prof)
    stages: list[StageTime] = []
    for k in range(p):
        n = layers[k]
        f = n * lf + (_sum(emb_t, "forward") if k == 0 else 0.0) + (tail_f if k == p - 1 else 0.0)
        b = n * (lb + lr) + (_sum(emb_t, "backward") if k == 0 else 0.0) + (tail_b if k == p - 1 else 0.0)
        w = n * lw + (tail_w if k == p - 1 else 0.0)
        if p > 1:
            both = ts.schedule in ("interleaved", "dualpipe")
            f += v * p2p_t * (1.0 if (k > 0 or both) else 0.0)
            b += v * p2p_t * (1.0 if (k < p - 1 or both) else 0.0)
        stages.append(StageTime(f, b, w))
    pipe = pipeline_time(ts.schedule, stages, m, v)
    slow = max(range(p), key=lambda k: stages[k].total)

    step_ops, dp_exposed, emb_sync = _step_ops(model, ts, hw, prof, params, layers, stages)
    opt_s = sum(x.total for x in step_ops if x.top.role in ("optimizer", "optimizer_aux"))
    step_time = pipe.time_s + dp_exposed + emb_sync + opt_s

    model_flops, hw_flops = step_flops(model, ts)
    peak, _ = matmul_rate(hw, ts.dtype, DEFAULTS)
    gpus = ts.gpus
    mtf = model_flops / (step_time * gpus)
    htf = hw_flops / (step_time * gpus)

    # the slowest stage's ops, counted per micro-batch
    ops = [x.counted(layers[slow]) for x in layer_t]
    if slow == 0:
        ops = [x for x in emb_t if x.top.pass_ == "forward"] + ops + [x for x in emb_t if x.top.pass_ != "forward"]
    if slow == p - 1:
        ops = ops + head_t + mtp_t
    ops = _ordered(ops) + step_ops
    comm_mb = sum(x.total for x in ops if x.top.is_comm and x.top.pass_ != "step")
    p2p_mb = (stages[slow].total - sum(x.total for x in ops if x.top.pass_ != "step")) if p > 1 else 0.0
    exposed_comm = m * (comm_mb + max(0.0, p2p_mb)) + dp_exposed + emb_sync

    breakdown = {
        "forward": m * sum(x.total for x in ops if x.top.pass_ == "forward" and not x.top.is_comm),
        "backward": m * sum(x.total for x in ops if x.top.pass_ == "backward" and not x.top.is_comm),
        "recompute": m * sum(x.total for x in ops if x.top.pass_ == "recompute" and not x.top.is_comm),
        "communication (exposed, in the pipeline)": m * (comm_mb + max(0.0, p2p_mb)),
        "pipeline bubble": pipe.bubble_s,
        "gradient reduce and parameter gather (exposed)": dp_exposed + emb_sync,
        "optimizer": opt_s,
    }
    mem = M.memory(model, ts, hw.hbm_visible_bytes, layers)
    proj = TrainProjection(
        hardware=hw, model=model, scenario=ts, profile=prof, step_time_s=step_time,
        tokens_per_s=_div(ts.tokens_per_step, step_time), model_flops=model_flops, hardware_flops=hw_flops,
        model_tflops_per_gpu=mtf / 1e12, hardware_tflops_per_gpu=htf / 1e12, mfu=mtf / peak, hfu=htf / peak,
        bubble_fraction=_div(pipe.bubble_s, step_time), exposed_comm_s=exposed_comm, memory=mem, pipeline=pipe,
        stages=stages, slowest_stage=slow, ops=ops, breakdown=breakdown,
        assumptions=([f"recompute {ts.recompute}: the least of none, selective and full whose memory fits "
                      "(--recompute auto)" + ("" if mem.fits else "; none does")] if auto else [])
        + assumptions(hw, model, ts, prof, layers, asked_auto=asked_auto))
    _check_finite(proj)
    return proj


# a training step longer than this (about 32 years) is an overflow in a profile or spec figure, not a projection
MAX_STEP_S = 1e9


def _div(a: float, b: float) -> float:
    """a / b, NaN where b is 0 or not finite (the check below refuses it)."""
    try:
        return a / b if math.isfinite(b) and b != 0 else math.nan
    except (ZeroDivisionError, OverflowError):
        return math.nan


def _check_finite(p: TrainProjection) -> None:
    """Nothing non-finite, negative or out of any physical range leaves the training projection: one line naming
    the quantities, as :func:`perfmodel.projection._check_finite` does for inference."""
    values = {"step time": p.step_time_s, "tokens/s": p.tokens_per_s, "model FLOP/s": p.model_tflops_per_gpu,
              "hardware FLOP/s": p.hardware_tflops_per_gpu, "MFU": p.mfu, "HFU": p.hfu,
              "pipeline bubble": p.bubble_fraction, "exposed communication": p.exposed_comm_s}
    values.update({f"step part {k!r}": v for k, v in p.breakdown.items()})
    for k, st in enumerate(p.stages):
        values.update({f"stage {k} forward": st.forward, f"stage {k} backward": st.backward})
    bad = []
    for k, v in values.items():
        try:
            x = float(v)
        except (TypeError, ValueError, OverflowError):
            x = math.nan
        if not math.isfinite(x) or x < 0:
            bad.append(k)
    if not bad and not (0 < p.step_time_s <= MAX_STEP_S and p.tokens_per_s > 0):
        bad.append(f"step time {p.step_time_s:.3g} s")
    if bad:
        files = getattr(p.hardware, "files", None)
        raise InputError(f"the training projection of {p.model.name} on {p.hardware.name} is not finite or out of "
                         f"range ({', '.join(bad[:3])}): a spec figure or a parameter of calibration profile "
                         f"{p.profile.name!r} is out of any physical range", file=files[0] if files else None)


def balanced_layers(n_layers: int, p: int, t_layer: float, t_first: float, t_last: float,
                    default: list[int]) -> list[int]:
    """Decoder layers per pipeline rank that make the slowest rank's micro-batch the shortest: the first rank
    also runs the embedding (``t_first``), the last the LM head, loss and any MTP modules (``t_last``), so they
    take fewer layers, as a tuned pipeline layout does (Megatron's --pipeline-model-parallel-layout,
    --decoder-first/last-pipeline-num-layers). Layers are whole: with a few layers a rank (deep pipelines) the
    last rank's extra work cannot be evened out, and the slowest rank sets the schedule's pace. ``default``
    (Megatron's uneven split) is kept where it is as fast."""
    if t_layer <= 0:
        return default

    def worst(c: list[int]) -> float:
        return max(c[k] * t_layer + (t_first if k == 0 else 0.0) + (t_last if k == p - 1 else 0.0)
                   for k in range(p))

    def counts(limit: float) -> list[int] | None:
        extra = [t_first if k == 0 else 0.0 for k in range(p)]
        extra[-1] += t_last
        c = [max(0, int((limit - e) / t_layer + 1e-9)) for e in extra]
        if sum(c) < n_layers:
            return None
        surplus = sum(c) - n_layers  # take the spare slots from the middle ranks first, then the ends
        for k in sorted(range(p), key=lambda k: (k in (0, p - 1), -c[k])):
            cut = min(surplus, c[k])
            c[k] -= cut
            surplus -= cut
        return c

    limits = sorted({n * t_layer + e for n in range(n_layers + 1) for e in (0.0, t_first, t_last, t_first + t_last)})
    best = default
    for limit in limits:
        c = counts(limit)
        if c is not None:
            best = c if worst(c) < worst(default) * (1 - 1e-9) else default
            break
    return best


def _renamed(x: TimedOp, prefix: str, n: float) -> TimedOp:
    """``x`` as a module's copy of it (``prefix`` before its name), run ``n`` times as often."""
    top = x.top
    op = replace(top.op, name=prefix + top.op.name, count=top.op.count * n)
    return TimedOp(replace(top, op=op), x.time, x.exposed, x.bound)


def _ordered(ops: list[TimedOp]) -> list[TimedOp]:
    order = {"forward": 0, "recompute": 1, "backward": 2}
    return sorted(ops, key=lambda x: order.get(x.top.pass_, 3))


def _p2p_time(model: Model, ts: TrainScenario, hw, prof) -> float:
    """One pipeline send of a micro-batch's activations (or their gradient) between stages: each TP rank
    sends its 1/tp share, then (without sequence parallelism) an NVLink all-gather rebuilds the whole
    tensor (Narayanan et al. 2021, section 4.1, scatter/gather)."""
    if ts.pp == 1:
        return 0.0
    act = G.act_dtype(ts)
    full = ts.micro_batch * (ts.seq // ts.cp) * model.hidden * G.O.bytes_per_element(act)
    stride = ts.tp * ts.cp * ts.data_parallel
    send = TrainOp(collective_op("pp.send", "p2p", full / ts.tp, 2, phase="prefill"), "forward", "comm", stride=stride)
    t, _ = time_train_op(send, hw, prof, {}, mode=ts.mode)
    if ts.tp > 1 and not ts.sequence_parallel:
        gather = TrainOp(collective_op("pp.allgather", "all_gather", full, ts.tp, phase="prefill"), "forward", "comm")
        t += time_train_op(gather, hw, prof, {}, mode=ts.mode)[0]
    return t


def _dp_collectives(model, ts: TrainScenario, hw, prof, params, layers, k: int) -> list[TimedOp]:
    """Stage ``k``'s gradient reduce (and ZeRO-1 parameter gather) once a step: its dense parameters over the
    ``dp x cp`` ranks (stride tp), its expert parameters over the expert-data-parallel group of ``dp x cp / ep``
    ranks (stride tp x ep: beyond one box it crosses the scale-out network)."""
    out: list[TimedOp] = []
    group = ts.data_parallel * ts.cp
    g_b = G.O.bytes_per_element(ts.grad_dtype)
    pk = M.stage_params(model, ts, k, layers)
    groups = [(pk.dense, group, ts.tp, "")]
    if pk.expert:
        groups.append((pk.expert, max(1, group // ts.ep), ts.tp * ts.ep, ".expert"))
    for n, grp, stride, tag in groups:
        if grp < 2 or n <= 0:
            continue
        kind = "all_reduce" if ts.zero == 0 else "reduce_scatter"
        top = TrainOp(collective_op(f"dp.grad_{kind}{tag}", kind, n * g_b, grp, phase="prefill", scope="model"),
                      "step", "comm", stride=stride)
        sec, bound = time_train_op(top, hw, prof, params, mode=ts.mode)
        out.append(TimedOp(top, sec, sec, bound))
        if ts.zero == 1:
            top = TrainOp(collective_op(f"dp.param_allgather{tag}", "all_gather", n * 2.0, grp, phase="prefill",
                                        scope="model"), "step", "comm", stride=stride)
            sec, bound = time_train_op(top, hw, prof, params, mode=ts.mode)
            out.append(TimedOp(top, sec, sec, bound))
    return out


def _step_ops(model, ts: TrainScenario, hw, prof, params, layers, stages: list[StageTime]):
    """Once-per-step ops (gradient reduce, parameter gather, tied-embedding sync, optimizer) with counts of 1;
    returns (ops, exposed data-parallel time, exposed embedding-sync time).

    Every stage reduces its own parameters' gradients: with an MoE model whose first layers are dense, the
    stages holding experts reduce far more than stage 0 (and, EP inside a box, over the scale-out network).
    With ``dp_overlap`` stage ``k``'s reduce hides under its last backward and under the drain that follows it
    (the last micro-batch's backward still crosses stages k-1 .. 0: their backward times), its parameter gather
    under its first forward and the fill before it (stages 0 .. k-1 forward the first micro-batch); the
    optimizer waits for the slowest (the gradient norm is global), so the step pays the largest exposed stage."""
    out: list[TimedOp] = []
    group = ts.data_parallel * ts.cp
    g_b = G.O.bytes_per_element(ts.grad_dtype)
    dp_exposed = 0.0
    if group > 1 and ts.zero < 2:
        best: list[TimedOp] = []
        for k in range(ts.pp):
            ops_k = _dp_collectives(model, ts, hw, prof, params, layers, k)
            t_grad = sum(x.time for x in ops_k if ".grad_" in x.top.name)
            t_param = sum(x.time for x in ops_k if ".param_" in x.top.name)
            if ts.dp_overlap:
                exp_grad = max(0.0, t_grad - sum(st.backward for st in stages[:k + 1]))
                exp_param = max(0.0, t_param - sum(st.forward for st in stages[:k + 1]))
            else:
                exp_grad, exp_param = t_grad, t_param
            for x in ops_k:
                share = (exp_grad / t_grad if t_grad else 0.0) if ".grad_" in x.top.name else (
                    exp_param / t_param if t_param else 0.0)
                x.exposed = x.time * share
            if not best or exp_grad + exp_param > dp_exposed:
                best, dp_exposed = ops_k, exp_grad + exp_param
        out += best
    emb_sync = 0.0
    if (model.tied_embeddings or G.mtp_modules(model, ts)) and ts.pp > 1:
        v = G.vocab_shard(model, ts.tp)
        stride = ts.tp * ts.cp * ts.data_parallel * (ts.pp - 1)
        top = TrainOp(collective_op("embedding.grad_sync", "all_reduce", v * model.hidden * g_b, 2, phase="prefill",
                                    scope="model"), "step", "comm", stride=stride)
        sec, bound = time_train_op(top, hw, prof, params, mode=ts.mode)
        out.append(TimedOp(top, sec, sec, bound))
        emb_sync = sec
    # optimizer over the fullest stage's parameter shard (every rank steps together), sharded by ZeRO >= 1 over
    # dp x cp (dense) and dp x cp / ep (expert) ranks
    dense_shard = group if ts.zero >= 1 else 1
    expert_shard = max(1, group // ts.ep) if ts.zero >= 1 else 1
    n = max(pk.dense / dense_shard + pk.expert / expert_shard
            for pk in (M.stage_params(model, ts, k, layers) for k in range(ts.pp)))
    if ts.schedule == "dualpipe":
        n *= 2.0
    state = 24.0 if ts.optimizer == "adamw" else 16.0  # fp32 master + states read and written
    norm = Op("optimizer.grad_norm", "reduce", "prefill", n, n * g_b, {"elems": n}, scope="model")
    step = Op("optimizer.step", "copy", "prefill", 10.0 * n, n * (state + g_b), {"params": n}, scope="model")
    cast = Op("optimizer.cast", "copy", "prefill", 0.0, n * 6.0, {"params": n}, scope="model")
    for op, role in ((norm, "optimizer_aux"), (step, "optimizer"), (cast, "optimizer_aux")):
        top = TrainOp(op, "step", role)
        sec, bound = time_train_op(top, hw, prof, params, mode=ts.mode)
        out.append(TimedOp(top, sec, sec, bound))
    return out, dp_exposed, emb_sync


def _grouped_note(prof: Profile) -> str:
    """How the expert GEMMs' grouped kernel is priced (perfmodel.train.cost.grouped_factor)."""
    eta = (prof.training or {}).get("grouped_gemm_eta")
    if not eta:
        return " at the dense GEMM model's rate: no grouped-gemm measurements in this profile (factor 1)"
    on = (prof.training or {}).get("grouped_gemm_measured_on") or {}
    formats = sorted({k.rsplit(".", 1)[0] for k in eta})
    per = "; ".join(f"{fmt} measured on {on.get(fmt) or prof.device or prof.name}: "
                    + ", ".join(f"{k.split('.')[-1]} {v:.2f}" for k, v in sorted(eta.items()) if k.startswith(fmt + "."))
                    for fmt in formats)
    return (f", at the grouped kernel's rate relative to the dense GEMM model (per pass, {per}) plus a per-expert "
            "cost in rows")


def assumptions(hw: HardwareSpec, model: Model, ts: TrainScenario, prof: Profile,
                layers: list[int] | None = None, *, asked_auto: bool = False) -> list[str]:
    out = []
    if ts.mode == "sol":
        out.append("speed of light: every operator at max(FLOPs / dense peak, bytes / bandwidth), collectives at "
                   "link bandwidth, no overheads")
    elif not prof.fitted:
        out.append("efficiencies are documented defaults (uncalibrated)")
    else:
        carried = f", carried from {prof.carried_from} by the transfer rules" if prof.carried_from else ""
        out.append(f"efficiencies fitted on {prof.device or prof.name}{carried}")
    if not (prof.training or {}):
        out.append("training kernels (backward GEMM layouts, attention backward, optimizer, loss) at documented "
                   "default factors: no train_kernel measurements in this profile")
    out.append("model FLOPs: Megatron definition (3 x forward matmuls, attention over the whole sequence, LM head "
               "included); hardware FLOPs add the recomputed forward")
    if ts.dtype in ("fp8", "fp4"):
        from .graph import recipe

        out.append(f"{ts.dtype} GEMMs in the {recipe(ts)} recipe: the quantization passes over each GEMM input, forward "
                   "and backward, are counted (perfmodel/train/graph.py RECIPE_PASSES, estimates)")
        split = float((prof.training or {}).get("fp8_split_over_fast", 1.0))
        if ts.dtype == "fp8" and recipe(ts) in ("delayed", "tensorwise") and split != 1.0:
            on = (prof.training or {}).get("fp8_accumulation_measured_on") or "the calibrated part"
            out.append(f"fp8 forward products with fast accumulation at 1/{split:.3f} of the dense model (fitted to "
                       f"split accumulation; the ratio measured on {on}), the gradients split (TransformerEngine)")
    out.append(f"MFU against the dense {ts.dtype.upper() if ts.dtype in ('fp8', 'fp4') else 'BF16'} peak "
               f"({matmul_rate(hw, ts.dtype, DEFAULTS)[0] / 1e12:.0f} TFLOP/s)")
    out.append(f"attention: {'FlashAttention-style fused kernel' if ts.attention == 'flash' else 'unfused (scores in HBM)'}"
               f"; kernels: {'fused (Megatron/TransformerEngine)' if ts.kernels == 'fused' else 'plain PyTorch'}; "
               "every kernel issued eagerly")
    out.append(f"TP collectives exposed{f' except {ts.tp_overlap:.0%}' if ts.tp_overlap else ''}; "
               + ("gradient reduce overlapped with the last backward" if ts.dp_overlap
                  else "gradient reduce exposed after the backward"))
    if ts.pp > 1:
        layers = layers or M.stage_layers(model, ts)
        out.append(f"{ts.schedule} schedule, {ts.micro_batches} micro-batches; stage layers {layers[0]}, "
                   f"{min(layers)}..{max(layers)}, {layers[-1]} (first and last stages also hold embedding / LM head"
                   f"{' / MTP' if G.mtp_modules(model, ts) else ''}; balanced by time)")
    if G.mtp_modules(model, ts):
        out.append(f"{G.mtp_modules(model, ts)} multi-token-prediction module(s) trained on the last stage "
                   "(--mtp-layers 0 to leave out)")
    if ts.cp > 1:
        out.append("context parallel: load-balanced ring attention, K/V exchange hidden under attention compute")
    if model.moe is not None:
        dispatcher = {"deepep": "DeepEP's normal kernels (a token once per rank, once per remote node)",
                      "hybridep": "HybridEP (a token once per rank at the NVLink all-to-all's rate, once per remote "
                                  "node at DeepEP's measured rate across nodes: an estimate, its kernels unmeasured)"
                      }.get(ts.moe_dispatcher, "NCCL all-to-all (a copy per routed pair)")
        dispatcher += (" as Megatron-Bridge 0.3.1's recipe for this model runs on this part (--moe-dispatcher)"
                       if asked_auto else " (--moe-dispatcher)")
        out.append(f"MoE: uniform routing, experts spread over ep data-parallel ranks, all-to-alls on {dispatcher} "
                   + ("hidden under another micro-batch's compute (only the excess shows)" if ts.a2a_hidden else
                      "exposed") + "; expert GEMMs forward and backward as per-expert dense GEMMs "
                   "(TransformerEngine grouped linear)" + _grouped_note(prof))
    if hw.scaleup_domain < ts.tp:
        out.append(f"TP {ts.tp} spans more than one scale-up domain ({hw.scaleup_domain} GPUs)")
    return out

