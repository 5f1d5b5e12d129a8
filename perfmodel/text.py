"""Readable terminal tables for projections, steps, specs and models."""
from __future__ import annotations

from .units import format_si


def _ms(x: float) -> str:
    return f"{x:.3g} ms" if x < 100 else f"{x:,.0f} ms"


def projection_table(p, *, verbose: bool = False) -> str:
    from .serialize import phase_bound

    sc = p.scenario
    band = p.bands
    lines = [
        f"{p.model.name} on {p.hardware.name}  ({sc.gpus} GPU{'s' if sc.gpus > 1 else ''}: TP {sc.tp}, PP {sc.pp}"
        f"{f', EP {sc.ep}' if sc.ep > 1 else ''}; {sc.dtype} weights, {sc.kv} KV cache)",
        f"scenario: isl {sc.isl}, osl {sc.osl}, batch {p.batch}, {sc.batching} batching, mode {sc.mode}",
        f"calibration: {p.profile.label}",
        "",
        f"  {'metric':<28}{'P50':>14}{'P10 .. P90':>26}",
    ]

    def row(label, key, value, unit_fmt):
        lo, _, hi = band[key]
        lines.append(f"  {label:<28}{unit_fmt(value):>14}{unit_fmt(lo) + ' .. ' + unit_fmt(hi):>26}")

    row("TTFT", "ttft_ms", p.ttft_s * 1e3, _ms)
    if p.decode is not None:
        row("TPOT (mean)", "tpot_ms", p.tpot_s * 1e3, _ms)
    lines.append(f"  {'end-to-end latency':<28}{_ms(p.e2e_s * 1e3):>14}")
    tok = lambda v: f"{v:,.0f} tok/s"  # noqa: E731
    row("output throughput (system)", "throughput_tok_s", p.throughput_tok_s, tok)
    lines.append(f"  {'output throughput per GPU':<28}{tok(p.throughput_tok_s_per_gpu):>14}")
    lines.append(f"  {'MFU / HBM bandwidth util.':<28}{f'{p.mfu:.1%} / {p.mbu:.1%}':>14}")
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
        for t in shown:
            lines.append(f"    {t.op.name:<22}{t.op.kind:<12}{_ms(float(t.total) * 1e3):>12}"
                         f"{float(t.total) / total:>7.1%}  {t.bound}")
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
    for o in d["ops"]:
        lines.append(f"    {o['name']:<22}{o['kind']:<12}{o['time_ms']:>10.4g} ms x {o['count']:<6g}{o['bound']}")
    return "\n".join(lines)


def show_thing(name: str) -> str:
    from .errors import InputError

    try:
        from .spec import load_spec

        return show_spec(load_spec(name))
    except InputError as spec_err:
        try:
            from .models import load_model

            return show_model(load_model(name))
        except InputError:
            raise InputError(f"{name!r} is neither a hardware spec nor a model ({spec_err.detail})",
                             field="show") from None


def show_spec(s) -> str:
    from .spec import SPEC_FIELDS, spec_value

    lines = [f"{s.name} ({s.key}; {s.vendor} {s.generation})", f"  files: {', '.join(s.files)}"]
    for f in SPEC_FIELDS:
        fig = s.figures.get(f.path)
        if fig is None:
            continue
        value = spec_value(s, f.attr)
        shown = fig.text or str(value)
        lines.append(f"  {f.label:<34}{shown:>16}  [{fig.source}] {fig.ref}")
    return "\n".join(lines)


def show_model(m) -> str:
    lines = [f"{m.name} ({m.key}; family {m.family})", f"  source: {m.source}",
             f"  parameters {m.param_count() / 1e9:.2f}B (active {m.active_param_count() / 1e9:.2f}B)",
             f"  hidden {m.hidden}, layers {m.layers}, heads {m.heads} (KV {m.kv_heads}), head_dim {m.head_dim}, "
             f"intermediate {m.intermediate}, vocab {m.vocab}, {m.mlp}, {m.norm}, {m.position}"]
    if m.moe:
        lines.append(f"  MoE: {m.moe}")
    if m.mla:
        lines.append(f"  MLA: {m.mla}")
    if m.aliases:
        lines.append(f"  aliases: {', '.join(m.aliases)}")
    for n in m.notes:
        lines.append(f"  note: {n}")
    return "\n".join(lines)
