"""Map a trace's GPU kernels to the operators of perfmodel's graph for the step that was run, and
predict each one.

What was run comes from the sidecar JSON the capture script writes beside the trace (model dimensions,
phase, batch, seq, context, dtype, versions). Kernels are attributed by the innermost module annotation
open at their launch (``perfmodel:<module path>``, one ``record_function`` range per Hugging Face module,
see :mod:`.capture`); a trace without such annotations falls back to kernel-name patterns
(:func:`kernel_class`) and is compared family by family.

Rows are per decoder layer (measured: the sum of a row's kernels in a layer, averaged over the layers)
plus the model-level rows (embedding, final norm, LM head). Predictions are in-stream operator times of
the latency model (``kernels="torch"``: the plain PyTorch layer), with no launch gaps: the trace's kernel
durations have none either.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError
from ..inputs import text as text_value
from .reader import Kernel

ANNOTATION_PREFIX = "perfmodel:"

# kernel-name patterns, tried in order (lower-cased names)
CLASS_PATTERNS = (
    ("attention", re.compile(r"flash|fmha|sdpa|attention|mha_|cudnn.*(mha|attn)|efficient_attention")),
    ("gemm", re.compile(r"gemm|cutlass|cublas|sm90_xmma|sm80_xmma|xmma|nvjet|matmul|s16816|wgmma")),
    ("norm", re.compile(r"rms|norm|reduce|mean")),
    ("copy", re.compile(r"copy|cat|memcpy|memset|index|gather|scatter|fill")),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|silu|mul|add|neg|pow|rsqrt|exp")),
)


def kernel_class(name: str) -> str:
    n = name.lower()
    for cls, pat in CLASS_PATTERNS:
        if pat.search(n):
            return cls
    return "other"


@dataclass
class Sidecar:
    model: dict  # hidden, layers, heads, kv_heads, head_dim, intermediate, vocab
    phase: str
    batch: int
    seq: int
    context: int
    dtype: str = "bf16"
    extra: dict = field(default_factory=dict)


SIDECAR_FIELDS = ("hidden", "layers", "heads", "kv_heads", "head_dim", "intermediate", "vocab")


def sidecar_path(trace: Path) -> Path:
    name = trace.name
    for suffix in (".json.gz", ".json", ".sqlite"):
        if name.endswith(suffix):
            return trace.with_name(name[: -len(suffix)] + ".sidecar.json")
    return trace.with_name(name + ".sidecar.json")


def read_sidecar(path) -> Sidecar:
    from ..io import check_input_path, loads_json, read_input_bytes

    check_input_path(path, what="the trace's sidecar JSON")
    p = Path(path)
    if not p.is_file():
        raise InputError("no sidecar describing the run (the capture script writes <trace>.sidecar.json); "
                         "pass --sidecar", file=str(p))
    d = loads_json(read_input_bytes(p, what="the trace's sidecar JSON", max_bytes=1 << 20), file=str(p),
                   what="the trace's sidecar JSON")
    if not isinstance(d, dict) or not isinstance(d.get("model"), dict):
        raise InputError("expected an object with a 'model' object", file=str(p), field="model")
    for f in SIDECAR_FIELDS:
        v = d["model"].get(f)
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise InputError(f"expected a positive integer, got {v!r}", file=str(p), field=f"model.{f}")
    if d.get("phase") not in ("prefill", "decode"):
        raise InputError(f"expected prefill or decode, got {d.get('phase')!r}", file=str(p), field="phase")
    for f in ("batch", "seq", "context"):
        v = d.get(f)
        if not isinstance(v, int) or isinstance(v, bool) or v < (0 if f == "context" else 1):
            raise InputError(f"expected a {'non-negative' if f == 'context' else 'positive'} integer, got {v!r}",
                             file=str(p), field=f)
    dtype = text_value(d.get("dtype", "bf16"), "dtype", file=str(p))
    extra = {k: _description(k, v, str(p)) for k, v in d.items()
             if k not in ("model", "phase", "batch", "seq", "context", "dtype")}
    return Sidecar(d["model"], d["phase"], d["batch"], d["seq"], d["context"], dtype, extra)


# the descriptive fields perfmodel.trace.capture writes as text
SIDECAR_TEXT = ("model_name", "device", "note", "torch", "cuda", "transformers", "attention", "command", "error")


def _description(key: str, v, file: str):
    """A descriptive field of a sidecar (model_name, device, torch, trace_bytes, ...), shown in the title and the
    JSON: printable text, a finite number >= 0, true/false or null (a NaN or a -1 had reached the JSON, an escape
    sequence the terminal)."""
    from ..inputs import number
    from ..safeyaml import key_text

    name = key_text(key)
    if isinstance(v, str) or key in SIDECAR_TEXT:
        return text_value(v, name, file=file, empty=True)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return number(v, name, file=file, lo=0, integer=isinstance(v, int))
    if v is None or isinstance(v, bool):
        return v
    raise InputError(f"expected text or a number, got {type(v).__name__}", file=file, field=name)


def model_of(sc: Sidecar):
    from ..models import Model

    m = sc.model
    return Model(key=str(sc.extra.get("model_name", "traced")), name=str(sc.extra.get("model_name", "traced")),
                 family="llama", hidden=m["hidden"], layers=m["layers"], heads=m["heads"], kv_heads=m["kv_heads"],
                 head_dim=m["head_dim"], intermediate=m["intermediate"], vocab=m["vocab"])


# module leaf -> row; rows not listed here come from the enclosing module's level (see _row_of)
LEAF_ROWS = {
    "input_layernorm": "attn.norm", "q_proj": "attn.q_proj", "k_proj": "attn.k_proj", "v_proj": "attn.v_proj",
    "o_proj": "attn.o_proj", "post_attention_layernorm": "ffn.norm", "gate_proj": "ffn.gate_proj",
    "up_proj": "ffn.up_proj", "down_proj": "ffn.down_proj", "act_fn": "ffn.swiglu", "mlp": "ffn.swiglu",
    "embed_tokens": "embed", "norm": "final.norm", "lm_head": "lm_head", "rotary_emb": "rotary tables",
}
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def _row_of(annotation: str, kclass: str) -> tuple[str, int | None]:
    """(row, layer index or None) for a kernel launched inside ``annotation``."""
    path = annotation[len(ANNOTATION_PREFIX):]
    m = _LAYER.search(path)
    layer = int(m.group(1)) if m else None
    leaf = path.rsplit(".", 1)[-1]
    if leaf == "self_attn":
        return ("attn.core" if kclass == "attention" else "attn.rotary+cache"), layer
    if layer is not None and re.fullmatch(r"\d+", leaf):
        return "residual", layer  # the decoder layer's own kernels: the two residual adds
    return LEAF_ROWS.get(leaf, f"other ({leaf})"), layer


@dataclass
class Row:
    name: str
    kind: str
    scope: str  # layer | model
    measured_s: float  # per layer for layer rows
    kernels: float  # kernels per layer
    predicted_s: float | None = None
    params: dict = field(default_factory=dict)

    @property
    def error(self) -> float | None:
        if self.predicted_s is None or self.measured_s <= 0:
            return None
        return self.predicted_s / self.measured_s - 1.0


def _row_specs(model, step, sc):
    """row -> (kind, [graph op names] or a GEMM shape (m, n, k), params for a refit Case)."""
    tokens = step.batch * step.seq
    hq, hkv, d, h = model.heads, model.kv_heads, model.head_dim, model.hidden
    gemm = lambda n, k, m=tokens: ("gemm", (m, n, k))  # noqa: E731
    return {
        "attn.norm": ("rmsnorm", ["attn.norm"]), "attn.q_proj": gemm(hq * d, h), "attn.k_proj": gemm(hkv * d, h),
        "attn.v_proj": gemm(hkv * d, h), "attn.rotary+cache": ("rotary", ["attn.rotary_q", "attn.rotary_k",
                                                                          "attn.kv_write"]),
        "attn.core": ("attention", ["attn.core"]), "attn.o_proj": gemm(h, hq * d),
        "residual": ("residual", ["attn.residual", "ffn.residual"]), "ffn.norm": ("rmsnorm", ["ffn.norm"]),
        "ffn.gate_proj": gemm(model.intermediate, h), "ffn.up_proj": gemm(model.intermediate, h),
        "ffn.swiglu": ("swiglu", ["ffn.swiglu"]), "ffn.down_proj": gemm(h, model.intermediate),
        "embed": ("embedding", ["embed"]), "final.norm": ("rmsnorm", ["final.norm"]),
        "lm_head": ("gemm", (step.batch, model.vocab, h)),
    }


def attribute(kernels: list[Kernel], layers: int) -> tuple[dict[str, list[float]], bool]:
    """Kernel time per row ({row: [seconds summed per layer or model]}) and whether annotations were found."""
    annotated = [k for k in kernels if k.annotation.startswith(ANNOTATION_PREFIX)]
    per: dict[str, dict] = {}
    if not annotated:
        for k in kernels:
            e = per.setdefault(f"family: {kernel_class(k.name)}", {"t": {}, "n": 0})
            e["t"][None] = e["t"].get(None, 0.0) + k.dur_s
            e["n"] += 1
        return {r: {"time": sum(e["t"].values()), "kernels": e["n"], "layers": None} for r, e in per.items()}, False
    for k in kernels:
        row, layer = _row_of(k.annotation, kernel_class(k.name)) if k.annotation.startswith(ANNOTATION_PREFIX) \
            else ("unattributed", None)
        e = per.setdefault(row, {"t": {}, "n": 0})
        e["t"][layer] = e["t"].get(layer, 0.0) + k.dur_s
        e["n"] += 1
    indices = {x for e in per.values() for x in e["t"] if x is not None}
    if indices and max(indices) >= layers:  # layers.<i> past the sidecar's count: a sidecar of another model
        raise InputError(f"the trace's modules reach layers.{max(indices)}, the sidecar says {layers} layers",
                         field="model.layers")
    if indices and len(indices) < layers:
        # the sidecar counts more layers than the trace ran: each measured layer would be divided by the
        # sidecar's count (layers: 5000 had read 0.0 us a layer)
        raise InputError(f"the trace holds {len(indices)} decoder layers (layers.0 .. layers.{max(indices)}), the "
                         f"sidecar says {layers}", field="model.layers")
    out = {}
    for row, e in per.items():
        seen = [x for x in e["t"] if x is not None]
        if seen:
            out[row] = {"time": sum(e["t"].values()) / layers, "kernels": e["n"] / layers, "layers": len(seen)}
        else:
            out[row] = {"time": sum(e["t"].values()), "kernels": e["n"], "layers": None}
    return out, True


def residual_rows(kernels: list[Kernel], side: Sidecar, hw, prof) -> tuple[list[Row], bool]:
    from .. import ops as O
    from ..cost import step_demand, time_op
    from ..graph import Step, build_ops
    from ..resolve import resolve_scenario
    from ..scenario import Scenario

    model = model_of(side)
    step = Step(side.phase, side.batch, side.seq, side.context)
    sc = resolve_scenario(Scenario(dtype=side.dtype, act_dtype=side.dtype if side.dtype in ("bf16", "fp16") else "bf16",
                                   kernels="torch", launch="eager").validated(), None, model)
    ops = {op.name: op for op in build_ops(model, step, sc)}
    sustained = step_demand(list(ops.values()), hw, prof)
    measured, annotated = attribute(kernels, model.layers)
    rows: list[Row] = []
    if not annotated:
        fam = {"gemm": 0.0, "attention": 0.0, "memory": 0.0}
        for op in ops.values():
            t = float(time_op(op, hw, prof, sustained=sustained).time) * op.count
            key = op.kind if op.kind in ("gemm", "attention") else "memory"
            fam[key] += t
        for name, m in sorted(measured.items()):
            cls = name.split(": ", 1)[1]
            pred = fam.get(cls) if cls in ("gemm", "attention") else None
            rows.append(Row(name, cls, "step", m["time"], m["kernels"], pred))
        mem = sum(m["time"] for n, m in measured.items() if n.split(": ", 1)[1] not in ("gemm", "attention"))
        rows.append(Row("family: memory-bound (all others)", "memory", "step", mem, 0, fam["memory"]))
        return rows, False
    specs = _row_specs(model, step, sc)
    for name, m in measured.items():
        spec = specs.get(name)
        scope = "layer" if m["layers"] else "model"
        if spec is None:
            rows.append(Row(name, "unmodelled", scope, m["time"], m["kernels"]))
            continue
        kind, what = spec
        if kind == "gemm":
            mm, n, k = what
            op = O.gemm(name, mm, n, k, side.dtype, out_dtype="fp32" if name == "lm_head" else None)
            pred = float(time_op(op, hw, prof, sustained=sustained).time)
            params = {"m": mm, "n": n, "k": k, "dtype": side.dtype, "groups": 1}
        else:
            chosen = [ops[o] for o in what if o in ops]
            pred = sum(float(time_op(o, hw, prof, sustained=sustained).time) for o in chosen) if chosen else None
            params = dict(chosen[0].params) if len(chosen) == 1 else {}
        rows.append(Row(name, kind, scope, m["time"], m["kernels"], pred, params))
    order = list(specs)
    rows.sort(key=lambda r: (r.scope != "layer", order.index(r.name) if r.name in order else 99, r.name))
    return rows, True
