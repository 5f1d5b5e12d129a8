"""Readable terminal tables for projections, steps, specs and models.

Columns are sized to their widest cell (:func:`table`), so no value runs into the next however large it
is; the INT8 tensor rate is integer operations (OPS), never FLOP/s.
"""
from __future__ import annotations

import re

from .units import format_si


def _ms(x: float) -> str:
    return f"{x:.3g} ms" if x < 100 else f"{x:,.0f} ms"


def table(rows: list[list[str]], align: str, *, indent: str = "  ", gap: str = "  ") -> list[str]:
    """Lines of a text table: each column as wide as its widest cell, columns ``gap`` apart. ``align``
    has one letter per column: ``l`` left, ``r`` right. A row shorter than the others is padded."""
    if not rows:
        return []
    n = max(len(r) for r in rows)
    rows = [list(r) + [""] * (n - len(r)) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(n)]
    lines = []
    for r in rows:
        cells = [(c.rjust(w) if (align[i] if i < len(align) else "l") == "r" else c.ljust(w))
                 for i, (c, w) in enumerate(zip(r, widths))]
        lines.append((indent + gap.join(cells)).rstrip())
    return lines


def rate_unit(attr: str) -> str:
    """The unit of a tensor/vector rate field: OPS for the integer format, FLOP/s for the others."""
    return "OPS" if attr.endswith("int8") else "FLOP/s"


def as_ops(text: str) -> str:
    """A rate written in FLOPS (``1978.9 TFLOPS``) as the integer operations it counts (``1978.9 TOPS``)."""
    return re.sub(r"FLOP(?:s)?(?:/s|S)", "OPS", text, flags=re.IGNORECASE)


def _engine_name(sc) -> str:
    from .engines import ENGINES

    eng = ENGINES.get(sc.engine)
    return eng.name if eng else sc.engine


def _images_text(sc) -> str:
    """A request's images on the scenario line (nothing without images)."""
    if not sc.image_tokens:
        return ""
    w, h = sc.image_size
    what = [f"{sc.images} image{'s' if sc.images != 1 else ''}"] if sc.images else []
    if sc.video_frames:
        what.append(f"a {sc.video_frames}-frame video")
    return f" + {' and '.join(what)} of {w}x{h} ({sc.image_tokens:,} tokens)"


def projection_table(p, *, verbose: bool = False, gpu_hour_usd: float | None = None) -> str:
    from .energy import projection_energy
    from .serialize import phase_bound

    sc = p.scenario
    band = p.bands
    lines = [
        f"{p.model.name} on {p.hardware.name}  ({sc.gpus} GPU{'s' if sc.gpus > 1 else ''}: TP {sc.tp}, PP {sc.pp}"
        f"{f', attention DP {sc.attention_dp}' if sc.attention_dp > 1 else ''}"
        f"{f', EP {sc.ep}' if sc.ep > 1 else ''}; {sc.dtype} weights, {sc.kv} KV cache)",
        f"scenario: isl {sc.isl}{_images_text(sc)}, osl {sc.osl}, batch {p.batch}, {sc.batching} batching, "
        f"engine {_engine_name(sc)}, mode {sc.mode}",
        f"calibration: {p.profile.label}",
        "",
    ]
    tok = lambda v: f"{v:,.0f} tok/s"  # noqa: E731
    rows = [["metric", "P50", "P10 .. P90"]]

    def row(label, key, value, unit_fmt):
        lo, _, hi = band[key]
        rows.append([label, unit_fmt(value), f"{unit_fmt(lo)} .. {unit_fmt(hi)}"])

    row("TTFT", "ttft_ms", p.ttft_s * 1e3, _ms)
    if p.decode is not None:
        row("TPOT (mean)", "tpot_ms", p.tpot_s * 1e3, _ms)
    rows.append(["end-to-end latency", _ms(p.e2e_s * 1e3)])
    row("output throughput (system)", "throughput_tok_s", p.throughput_tok_s, tok)
    rows.append(["output throughput per GPU", tok(p.throughput_tok_s_per_gpu)])
    rows.append(["MFU / HBM bandwidth util.", f"{p.mfu:.1%} / {p.mbu:.1%}"])
    e = projection_energy(p, gpu_hour_usd)
    if e["joules_per_token"]["output"] is not None:
        rows.append(["energy per output token", f"{e['joules_per_token']['output']:.3g} J"])
        rows.append(["average power per GPU", f"{e['avg_power_w']:,.0f} W"])
    if e["usd_per_million_tokens"] is not None:
        rows.append(["cost per million output tokens", f"${e['usd_per_million_tokens']:,.3g}"])
    lines += table(rows, "lrr")
    lines.append("")
    lines.append(f"  bound: prefill {phase_bound(p.prefill)}"
                 + (f", decode {phase_bound(p.decode)}" if p.decode else ""))
    m = p.memory
    lines.append(f"  memory per GPU: weights {format_si(m.weights, 'B')}, KV cache {format_si(m.kv_cache, 'B')}, "
                 f"activations {format_si(m.activations, 'B')}, workspace {format_si(m.workspace, 'B')}; "
                 f"total {format_si(m.total, 'B')} of {format_si(m.capacity, 'B')} usable")
    for ph in (p.prefill, p.decode):
        if ph is None:
            continue
        lines.append("")
        lines.append(f"  {ph.name} step (batch {float(ph.batch):g}, {float(ph.seq):g} new, {float(ph.context):g} cached): "
                     f"{_ms(float(ph.time_s) * 1e3)}")
        items = sorted(ph.times, key=lambda t: -float(t.total))
        shown = items if verbose else items[:6]
        total = float(ph.time_s) or 1.0
        lines += table([[t.op.name, t.op.kind, _ms(float(t.total) * 1e3), f"{float(t.total) / total:.1%}", str(t.bound)]
                        for t in shown], "llrrl", indent="    ")
        if not verbose and len(items) > len(shown):
            lines.append(f"    ... {len(items) - len(shown)} more (--ops lists all)")
    lines.append("")
    lines.append("  assumptions: " + "; ".join(p.assumptions))
    return "\n".join(lines)


def step_table(d: dict) -> str:
    lines = [f"{d['model']['name']} on {d['arch']['name']}: {d['phase']} step, batch {d['batch']}, "
             f"seq {d['seq']}, context {d['context']}, TP {d['tp']}, {d['dtype']}",
             f"calibration: {d['calibration']['label']}",
             f"  step {d['time_ms']:.4g} ms, one decoder layer {d['layer_ms']:.4g} ms, bound {d['bound']}", ""]
    lines += table([[o["name"], o["kind"], f"{o['time_ms']:.4g} ms", f"x {o['count']:g}", str(o["bound"])]
                    for o in d["ops"]], "llrll", indent="    ")
    return "\n".join(lines)


def show_thing(name: str) -> str:
    """A spec or a model, whichever ``name`` is. When it is neither, the error of the kind the file looks
    like (a descriptor has ``layers``, a spec ``compute``), with its file and field, on one line."""
    from .errors import InputError

    try:
        from .spec import load_spec

        return show_spec(load_spec(name))
    except InputError as spec_err:
        try:
            from .models import load_model

            return show_model(load_model(name))
        except InputError as model_err:
            if _looks_like_model(spec_err, model_err):
                raise model_err from None
            if _looks_like_spec(spec_err, model_err):
                raise spec_err from None
            raise InputError(f"{name!r} is neither a hardware spec nor a model ({spec_err.detail})",
                             field="show") from None


def _looks_like_model(spec_err, model_err) -> bool:
    """The spec loader stopped at a top-level key a spec does not have (layers, hidden, ...) while the model
    loader got past its own key check: the file is a model descriptor with a mistake in it."""
    return (spec_err.field is not None and "." not in str(spec_err.field) and str(spec_err.detail).startswith("unknown key")
            and not str(model_err.detail).startswith(("unknown field", "unknown model", "expected a mapping")))


def _looks_like_spec(spec_err, model_err) -> bool:
    return spec_err.file is not None and (str(model_err.detail).startswith(("unknown field", "expected a mapping"))
                                          or spec_err.field is None or str(spec_err.field).startswith("line"))


def show_spec(s) -> str:
    from .spec import SPEC_FIELDS, SUSTAINED_FIELDS, spec_value

    lines = [f"{s.name} ({s.key}; {s.vendor} {s.generation})", f"  files: {', '.join(s.files)}"]
    rows = []
    for f in SPEC_FIELDS + SUSTAINED_FIELDS:
        fig = s.figures.get(f.path)
        if fig is None:
            continue
        value = spec_value(s, f.attr)
        shown = fig.text or str(value)
        if f.dimension == "flop_rate" and rate_unit(f.attr) == "OPS":
            shown = as_ops(shown)
        rows.append([f.label, shown, f"[{fig.source}]", fig.ref])
    lines += table(rows, "lrll")
    return "\n".join(lines)


def moe_text(moe) -> str:
    shared = ""
    if moe.num_shared_experts:
        s = "s" if moe.num_shared_experts > 1 else ""
        shared = f"; {moe.num_shared_experts} shared expert{s} (FFN {moe.shared_intermediate:,})"
    dense = f"; first {moe.first_dense_layers} layers dense" if moe.first_dense_layers else ""
    return (f"{moe.num_experts} routed experts, top-{moe.top_k} per token, expert FFN {moe.expert_intermediate:,}"
            f"{shared}{dense}")


def mla_text(mla) -> str:
    q = f"query latent rank {mla.q_lora_rank:,}" if mla.q_lora_rank else "full-rank queries"
    return (f"KV latent rank {mla.kv_lora_rank:,}, {q}; per head: query/key {mla.qk_nope_head_dim} + "
            f"{mla.qk_rope_head_dim} rotary, value {mla.v_head_dim}")


def show_model(m) -> str:
    lines = [f"{m.name} ({m.key}; family {m.family})", f"  source: {m.source}",
             f"  parameters {m.param_count() / 1e9:.2f}B (active {m.active_param_count() / 1e9:.2f}B)",
             f"  hidden {m.hidden}, layers {m.layers}, heads {m.heads} (KV {m.kv_heads}), head_dim {m.head_dim}, "
             f"intermediate {m.intermediate}, vocab {m.vocab}, {m.mlp}, {m.norm}, {m.position}"]
    if m.moe:
        lines.append(f"  MoE: {moe_text(m.moe)}")
    if m.mla:
        lines.append(f"  MLA: {mla_text(m.mla)}")
    if m.aliases:
        lines.append(f"  aliases: {', '.join(m.aliases)}")
    for n in m.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)
