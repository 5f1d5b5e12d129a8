"""The what-if workbook: an xlsx whose numbers are live formulas of labelled input cells.

One formula, one place: nothing here restates the cost model. Each operator's time formula is what the
model's own code returns when it is run on Excel expressions instead of numbers:

- the operators come from :func:`perfmodel.graph.build_ops` with a :class:`~perfmodel.graph.Step` whose
  batch, sequence and context are :class:`~perfmodel.cost.backend.Expr` cell references, so every shape
  (m, n, k, groups, bytes, flops, ...) is a formula of the Inputs sheet; each shape quantity gets its own
  cell in the operator's row;
- the time is ``time_op(op, hw_view, prof_view, xp=XL)`` with the op's shapes replaced by references to
  those cells, ``hw_view`` a copy of the spec whose figures are references to the Inputs sheet and
  ``prof_view`` a copy of the latency-model :class:`~perfmodel.profile.Profile` likewise (built over
  ``dataclasses.fields(Profile)``, so new or refitted parameters come along by themselves);
- the step totals, TTFT, TPOT (Simpson's rule over three decode contexts, as ``project._decode_mean``),
  end-to-end latency and throughput mirror :func:`perfmodel.projection.evaluate_step` and
  :func:`perfmodel.projection.serving_times` line by line.

Structural choices (model, TP/PP/EP, formats, launch model, batching, scale-up domain) shape the
formulas themselves and are fixed at export; they are listed on the Inputs sheet as such. Any
user-supplied text goes into cells as a string, never as a formula (:func:`set_text`).
"""
from __future__ import annotations

import dataclasses
import io
import re
from collections import Counter
from dataclasses import dataclass, field

from .. import __version__
from ..cost import _mem_kind, ideal_compute, time_op
from ..cost.backend import XL, Expr, formula
from ..cost.overlap import exposed_runs, resolve_method
from ..energy.model import limit_w, power_params
from ..energy.report import power_source
from ..graph import Step, build_ops
from ..models import Model
from ..ops import COMM_KINDS, COMPUTE_KINDS
from ..profile import Profile
from ..scenario import Scenario
from ..spec import SPEC_FIELDS, HardwareSpec, spec_value
from ..io import FORMULA_LEADS
from .common import command_line, field_unit, spec_files

MAX_FORMULA = 8000  # Excel's limit is 8192 characters; keep a margin
INPUT_SHEET = "Inputs"


# ---------------------------------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------------------------------


def set_text(ws, ref: str, text) -> None:
    """Write ``text`` as a string cell. openpyxl turns any str starting with '=' into a formula; text that
    starts with = + - @ is stored as a string with Excel's quote prefix, so it never becomes one."""
    s = "" if text is None else str(text)
    c = ws[ref]
    c.value = s
    if s.startswith(FORMULA_LEADS):
        c.data_type = "s"
        c.quotePrefix = True


def set_formula(ws, ref: str, x) -> None:
    """Write an Expr as a live formula, a number as a number."""
    c = ws[ref]
    if isinstance(x, Expr):
        f = formula(x)
        if len(f) > MAX_FORMULA:
            raise ValueError(f"formula in {ws.title}!{ref} is {len(f)} characters (limit {MAX_FORMULA})")
        c.value = f
    elif isinstance(x, bool):
        c.value = x
    else:
        c.value = float(x)


def _col(i: int) -> str:
    """Column letters of a 1-based index (A, ..., Z, AA, ...)."""
    out = ""
    while i:
        i, r = divmod(i - 1, 26)
        out = chr(65 + r) + out
    return out


# ---------------------------------------------------------------------------------------------------
# Common subexpressions: a long formula keeps its meaning when a repeated parenthesised group (or
# function call) is moved into a helper cell and referenced. Used only when a formula would pass the limit.
# ---------------------------------------------------------------------------------------------------


_PAREN_TOKENS = re.compile(r"[A-Za-z_]*\(|[,)]")


def _groups(text: str) -> list[str]:
    """Every parenthesised expression or function call in ``text``, innermost first. One pass over the
    parentheses and commas: each open parenthesis remembers whether a comma stood at its own depth (then,
    without a function name before it, it is an argument list, not an expression)."""
    out = []
    stack: list[list] = []  # [start of the function name (or the parenthesis), parenthesis, comma seen]
    for m in _PAREN_TOKENS.finditer(text):
        tok = m.group()
        if tok == ",":
            if stack:
                stack[-1][2] = True
        elif tok == ")":
            if stack:
                start, paren, comma = stack.pop()
                if start == paren and comma:
                    continue  # an argument list, not an expression
                out.append(text[start:m.end()])
        else:
            stack.append([m.start(), m.end() - 1, False])
    return out


def hoist(text: str, new_ref, limit: int = MAX_FORMULA) -> tuple[str, list[tuple[str, str]]]:
    """Shorten ``text`` below ``limit`` by moving repeated groups into cells. ``new_ref()`` gives the next
    helper cell's reference. Returns the short text and the (ref, text) helper cells, in dependency order."""
    helpers = []
    while len(text) + 1 > limit:
        best, gain = None, 0
        groups = Counter(g for g in _groups(text) if len(g) > 12)
        # rank by how often each group appears among the parsed groups (fast), then confirm the winners
        # as whole expressions of the text
        ranked = sorted(((n - 1) * len(g), g) for g, n in groups.items())
        for est, g in reversed(ranked[-8:]):
            n = len(_occurrences(text, g))
            if n > 1 and (n - 1) * len(g) > gain:
                best, gain = g, (n - 1) * len(g)
        if best is None:  # nothing repeats: move out the largest proper group
            inner = [g for g in groups if len(g) < len(text) - 2]
            best = max(inner, key=len, default=None)
        if best is None:
            raise ValueError(f"formula of {len(text)} characters cannot be shortened below {limit}")
        ref = new_ref()
        sub, more = hoist(best, new_ref, limit)
        helpers += more
        helpers.append((ref, sub))
        text = _occurrences(text, best, ref)
    return text, helpers


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def _occurrences(text: str, group: str, ref: str | None = None):
    """Occurrences of ``group`` in ``text`` that are whole expressions (a parenthesised group right after a
    function name is that call's argument list, not an expression; a name right after a letter, digit, $ or
    ! is part of a longer reference). With ``ref``: the text with them replaced. Plain string search: the
    groups are thousands of characters long, too long to compile as patterns quickly."""
    bad = _NAME_CHARS if group.startswith("(") else _NAME_CHARS | {"$", "!"}
    found = []
    i = text.find(group)
    while i >= 0:
        if i == 0 or text[i - 1] not in bad:
            found.append(i)
            i = text.find(group, i + len(group))
        else:
            i = text.find(group, i + 1)
    if ref is None:
        return [group] * len(found)
    out, last = [], 0
    for i in found:
        out.append(text[last:i])
        out.append(ref)
        last = i + len(group)
    out.append(text[last:])
    return "".join(out)


# ---------------------------------------------------------------------------------------------------
# The workbook model
# ---------------------------------------------------------------------------------------------------


@dataclass
class InputRow:
    name: str
    value: object  # number, or an Expr for a derived input
    unit: str = ""
    source: str = ""
    note: str = ""
    editable: bool = True
    row: int = 0


@dataclass
class InputsSheet:
    rows: list = field(default_factory=list)  # InputRow or ("section", title)
    first_row: int = 6
    by_name: dict = field(default_factory=dict)

    def section(self, title: str) -> None:
        self.rows.append(("section", title))

    def add(self, name, value, unit="", source="", note="", editable=True) -> Expr:
        r = InputRow(name, value, unit, source, note, editable)
        self.rows.append(r)
        r.row = self.first_row + len(self.rows) - 1
        self.by_name[name] = r
        return Expr(f"{INPUT_SHEET}!$B${r.row}")

    def ref(self, name: str) -> Expr:
        return Expr(f"{INPUT_SHEET}!$B${self.by_name[name].row}")


def _op_energy_formula(op, power: dict, I):
    """Dynamic joules of one run of ``op`` on one GPU as a formula of the power inputs (perfmodel.energy.op_energy)."""
    if op.kind in COMM_KINDS:
        return 0.0
    e = I("j_per_byte") * op.bytes
    if op.kind in COMPUTE_KINDS:
        key = _flop_key(power, op.params["dtype"])
        e = e + I(f"j_per_flop.{key}") * op.flops
    return e


def _flop_key(power: dict, dtype: str) -> str:
    """The j_per_flop entry a format uses (perfmodel.energy.model.flop_energy's lookup)."""
    from ..dtypes import TENSOR_RATE_KEY

    for key in (dtype, TENSOR_RATE_KEY.get(dtype, dtype), "bf16"):
        if key in power["j_per_flop"]:
            return key
    return next(iter(power["j_per_flop"]))


def _energy_rows(srow, S, I, steps, sc, proj, static: bool) -> None:
    """Energy per output token, average power and tokens per joule, as perfmodel.energy.projection_energy
    computes them: a replica's step energy is tp (x pp micro-batches for decode) copies of the capped dynamic
    energy plus every GPU's static power over the step's time."""
    from ..energy import projection_energy

    e = projection_energy(proj)
    headroom = XL.maximum(I("power_limit_w") - I("static_w"), 0.0)

    def replica(sheet: str, t, copies: float):
        dyn = XL.minimum(Expr(f"{sheet}!$E$2"), headroom * t)
        return copies * dyn + I("gpus") * I("static_w") * t

    e_pre = srow("energy_prefill_j", "energy of the TTFT prefill step (replica)",
                 replica(steps[0].title, S["ttft_s"], float(sc.tp)), "J")
    if len(steps) > 1:
        e_dec = srow("energy_decode_j", "energy of the mean decode step (replica)",
                     replica(steps[2].title, S["tpot_s"], float(sc.tp * sc.pp)), "J")
        if static:
            j_out = (e_pre + (I("osl") - 1) * e_dec) / (I("batch") * I("osl"))
        else:
            j_out = e_dec / I("batch") + e_pre / S["n_pre"] / I("osl")
    else:
        j_out = e_pre / (S["n_pre"] * I("osl"))
    srow("joules_per_token", "energy per output token", j_out, "J", e["joules_per_token"]["output"],
         "prefill amortised over the output tokens as in the throughput formula")
    srow("avg_power_w", "average power per GPU", S["joules_per_token"] * S["throughput_tok_s"] / I("gpus"), "W",
         e["avg_power_w"])
    srow("tokens_per_joule", "output tokens per joule", 1.0 / S["joules_per_token"], "tok/J", e["tokens_per_joule"])


@dataclass
class _Timed:
    """An op and the cell holding its time: what the overlap model reads (``.op``, ``.time``)."""

    op: object
    time: object


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def profile_inputs(prof: Profile):
    """(name, value, field, key) for every numeric latency-model parameter, generically over the dataclass."""
    out = []
    for fl in dataclasses.fields(prof):
        v = getattr(prof, fl.name)
        if _numeric(v):
            out.append((fl.name, v, fl.name, None))
        elif isinstance(v, dict) and v and all(_numeric(x) for x in v.values()):
            for k, x in v.items():
                out.append((f"{fl.name}[{k}]", x, fl.name, k))
    return out


def _hw_fields(hw: HardwareSpec):
    for f in SPEC_FIELDS:
        v = spec_value(hw, f.attr)
        if v is not None:
            yield f, v


def _views(hw, prof, inputs: InputsSheet, plain_prof: set[str]):
    hw_changes = {}
    tensor = {}
    for f, _ in _hw_fields(hw):
        if f.attr == "scaleup_domain":
            continue  # decides which formula applies (group <= domain): stays a number
        ref = inputs.ref(f.attr)
        if f.attr.startswith("tensor_flops."):
            tensor[f.attr.split(".", 1)[1]] = ref
        else:
            hw_changes[f.attr] = ref
    hw_view = dataclasses.replace(hw, **hw_changes, tensor_flops=tensor)
    changes: dict = {}
    for name, _v, fname, key in profile_inputs(prof):
        if fname in plain_prof:
            continue
        ref = inputs.ref(name)
        if key is None:
            changes[fname] = ref
        else:
            changes.setdefault(fname, dict(getattr(prof, fname)))[key] = ref
    return hw_view, dataclasses.replace(prof, **changes)


@dataclass
class StepSheet:
    key: str
    title: str
    phase: str
    batch: Expr  # references to the cells (on the Summary sheet) the step reads
    seq: object
    context: object
    total_ref: str = ""


def _step_ops(model, sc, st: StepSheet):
    # the step's own cells B2..B4 hold batch, new tokens and context; ops are formulas of them
    batch = Expr("$B$2")
    seq = Expr("$B$3") if isinstance(st.seq, Expr) else st.seq
    ctx = Expr("$B$4") if isinstance(st.context, Expr) else st.context
    return build_ops(model, Step(st.phase, batch, seq, ctx), sc)


# Profile fields the cost code takes as plain numbers (tile and block sizes); anything else is probed.
STRUCTURAL_FIELDS = {"attn_block_q", "attn_block_k"}


def _probe_plain_profile_fields(model, sc, hw, prof, steps) -> set[str]:
    """Profile fields the cost code uses as plain numbers (e.g. a block size passed to float()): those
    cannot be cells; they are shown as fixed. Found by trying, so new fields are handled automatically."""
    names = sorted({fname for _, _, fname, _ in profile_inputs(prof)})
    dummy = InputsSheet()
    for f, v in _hw_fields(hw):
        dummy.add(f.attr, v)
    for name, v, _, _ in profile_inputs(prof):
        dummy.add(name, v)
    opsets = [_step_ops(model, sc, st) for st in steps]

    def ok(plain: set[str]) -> bool:
        hw_view, pv = _views(hw, prof, dummy, plain)
        try:
            for ops in opsets:
                for op in ops:
                    time_op(op, hw_view, pv, mode=sc.mode, world=sc.gpus, xp=XL)
        except TypeError:
            return False
        return True

    if ok(set()):
        return set()
    if ok(STRUCTURAL_FIELDS & set(names)):  # the usual answer: block sizes are integers, not inputs
        return STRUCTURAL_FIELDS & set(names)
    plain = set()
    for n in names:
        if not ok(set(names) - {n}):
            plain.add(n)
    if not ok(plain):
        raise RuntimeError("the cost model cannot be written as Excel formulas with these inputs")
    return plain


def build_workbook(hw: HardwareSpec, model: Model, sc: Scenario, prof: Profile, *, sweep=None,
                   argv: list[str] | None = None):
    """The what-if workbook (an openpyxl Workbook) for one part. ``sweep`` (a :class:`.sweep.SweepResult`)
    fills the Sweep sheet; default: batch 1, 2, 4, ... up to the largest that fits."""
    from .common import require_openpyxl

    require_openpyxl()
    from openpyxl import Workbook
    from openpyxl.styles import Alignment, Font, PatternFill

    from .. import capacity
    from ..projection import project_resolved

    proj = project_resolved(hw, model, sc, prof)
    sc_r = proj.scenario  # batch resolved
    batch_max = sc.batch == "max"

    bold = Font(bold=True)
    title_font = Font(bold=True, size=14)
    input_fill = PatternFill("solid", fgColor="FFF2CC")
    fixed_fill = PatternFill("solid", fgColor="EDEDED")
    head_fill = PatternFill("solid", fgColor="DDEBF7")

    wb = Workbook()
    ws_in = wb.active
    ws_in.title = INPUT_SHEET
    inputs = InputsSheet()

    # -- scenario ------------------------------------------------------------------------------
    inputs.section("Scenario (yellow cells are live inputs; grey ones are fixed at export)")
    inputs.add("isl", sc_r.isl, "tokens", "scenario", "input (prompt) tokens per request")
    inputs.add("osl", sc_r.osl, "tokens", "scenario", "output tokens per request")
    inputs.add("prefill_chunk", sc_r.prefill_chunk, "tokens", "scenario", "prefill token budget per step (continuous)")
    overlap_method, overlap_fraction = resolve_method(sc_r.overlap)
    if overlap_method in ("none", "fixed"):
        inputs.add("overlap", overlap_fraction, "fraction", "scenario", "share of collective time hidden under compute")
    else:  # the overlap model's own parameters are inputs (Profile.overlap): the method is fixed at export
        inputs.add("overlap", overlap_method, "method", "scenario",
                   "collective overlap method (perfmodel.cost.overlap; docs/collectives.md)", editable=False)
    total_policy = sc_r.mem_policy != "free"
    inputs.add("mem_fraction", sc_r.mem_fraction, "fraction", "engine",
               "share of device-visible memory the engine uses" if total_policy else
               "share of the memory free after weights, activations and reserve that the KV cache takes")
    inputs.add("mem_reserve", sc_r.mem_reserve, "B", "engine",
               "bytes per GPU outside the engine's pool: CUDA context, workspaces, CUDA graphs")
    if sc_r.max_batch:
        inputs.add("max_batch", sc_r.max_batch, "sequences", "engine", "most sequences the engine's scheduler runs "
                   "at once (caps a 'max' batch)")
    if batch_max:
        inputs.add("batch", None, "sequences", "derived", "largest batch that fits ('max'): formula of the "
                   "device-visible memory, isl, osl and the memory rows below, as perfmodel.capacity.max_batch; "
                   "type a number to fix it", editable=True)
    else:
        inputs.add("batch", sc_r.batch, "sequences", "scenario", "concurrent sequences per model replica")
    for name, value, note in (("model", model.name, "model (structure of every formula)"),
                              ("engine", sc_r.engine, "serving engine whose preset filled the engine fields"),
                              ("mem_policy", sc_r.mem_policy, "engine memory policy: total (everything within "
                               "mem_fraction of the device) or free (the KV cache takes mem_fraction of what is free)"),
                              ("tp", sc_r.tp, "tensor parallel"), ("pp", sc_r.pp, "pipeline parallel"),
                              ("ep", sc_r.ep, "expert parallel"), ("gpus", sc_r.gpus, "GPUs per replica (tp x pp)"),
                              ("dtype", sc_r.dtype, "weights and GEMM format"), ("kv_dtype", sc_r.kv, "KV-cache format"),
                              ("act_dtype", sc_r.act_dtype, "activations"), ("mode", sc_r.mode, "latency model or sol"),
                              ("launch", sc_r.launch, "kernel launch model"), ("batching", sc_r.batching, "batching"),
                              ("kernels", sc_r.kernels, "fused (an engine's kernels) or torch (plain PyTorch)"),
                              ("rotary", sc_r.rotary, "where the rotary embedding runs"),
                              ("attention_kernel", sc_r.attention_kernel, "attention kernel library"),
                              ("fp8_attention", sc_r.fp8_attention, "attention products in fp8 with an fp8 KV cache")):
        inputs.add(name, value, "", "scenario", note + " (fixed at export)", editable=False)

    # -- power model (perfmodel.energy): live inputs -------------------------------------------
    power = power_params(prof, hw)
    inputs.section(f"Power model per GPU ({power_source(prof, power)}; docs/energy.md)")
    inputs.add("static_w", power["static_w"], "W", "power", "board power while kernels run, before any work")
    inputs.add("j_per_byte", power["j_per_byte"], "J/B", "power", "energy per byte moved through HBM")
    for fmt, j in power["j_per_flop"].items():
        inputs.add(f"j_per_flop.{fmt}", j, "J/FLOP", "power", f"energy per tensor-core FLOP in {fmt}")
    inputs.add("power_limit_w", limit_w(power, hw), "W", "power", "the board's power limit: dynamic energy is capped")

    # -- memory helpers (structure-only numbers from perfmodel.capacity) -----------------------
    inputs.section("Memory per GPU, from the model structure (fixed at export)")
    inputs.add("weights_bytes", capacity.weight_bytes(model, sc_r), "B", "derived", "weights on the fullest GPU",
               editable=False)
    inputs.add("kv_bytes_per_token", capacity.kv_bytes_per_token(model, sc_r), "B", "derived",
               "KV cache one token adds on one GPU", editable=False)
    inputs.add("act_bytes_per_token", capacity._widest_bytes(model, sc_r), "B", "derived",
               "widest live activations per prefill token", editable=False)
    inputs.add("logit_bytes_per_seq", capacity._logit_bytes(model, sc_r), "B", "derived",
               "fp32 logits of one sequence", editable=False)

    # -- hardware ------------------------------------------------------------------------------
    inputs.section(f"Hardware: {hw.name} ({hw.key})")
    for f, v in _hw_fields(hw):
        fig = hw.figures.get(f.path)
        note = f.label + (f": {fig.text}" if fig and fig.text else "") + (f" ({fig.ref})" if fig and fig.ref else "")
        structural = f.attr == "scaleup_domain"
        inputs.add(f.attr, v, field_unit(f), fig.source if fig else "derived",
                   note + ("; decides the collective algorithm (fixed at export)" if structural else ""),
                   editable=not structural)

    # -- latency model -------------------------------------------------------------------------
    steps = [
        StepSheet("prefill", "Prefill", "prefill", Expr(""), Expr(""), 0),
        StepSheet("decode_lo", "Decode_start", "decode", Expr(""), 1, Expr("")),
        StepSheet("decode_mid", "Decode_mid", "decode", Expr(""), 1, Expr("")),
        StepSheet("decode_hi", "Decode_end", "decode", Expr(""), 1, Expr("")),
    ]
    if sc_r.osl <= 1:
        steps = steps[:1]
    plain = _probe_plain_profile_fields(model, sc_r, hw, prof, steps)
    inputs.section(f"Latency model parameters: {prof.label}")
    for name, v, fname, _ in profile_inputs(prof):
        fixed = fname in plain
        inputs.add(name, v, _profile_unit(fname), "fitted" if prof.fitted else "default",
                   (prof.description if not fixed else "used as a plain number by the cost code (fixed at export)"),
                   editable=not fixed)

    if batch_max:
        inputs.by_name["batch"].value = _max_batch_formula(inputs.ref, total_policy, bool(sc_r.max_batch))

    hw_view, prof_view = _views(hw, prof, inputs, plain)

    # -- write Inputs --------------------------------------------------------------------------
    set_text(ws_in, "A1", "What-if inputs")
    ws_in["A1"].font = title_font
    set_text(ws_in, "A2", f"{model.name} on {hw.name}")
    set_text(ws_in, "A3", "Change a yellow cell and every operator time, TTFT, TPOT and throughput recomputes. "
                          "The formulas are generated from perfmodel's cost model code (see About).")
    for i, h in enumerate(("name", "value", "unit", "source", "note"), start=1):
        c = ws_in.cell(row=5, column=i, value=h)
        c.font = bold
        c.fill = head_fill
    row = inputs.first_row
    for item in inputs.rows:
        if isinstance(item, tuple):
            set_text(ws_in, f"A{row}", item[1])
            ws_in[f"A{row}"].font = bold
        else:
            set_text(ws_in, f"A{row}", item.name)
            if isinstance(item.value, str):
                set_text(ws_in, f"B{row}", item.value)
            else:
                set_formula(ws_in, f"B{row}", item.value)
            ws_in[f"B{row}"].fill = input_fill if item.editable else fixed_fill
            set_text(ws_in, f"C{row}", item.unit)
            set_text(ws_in, f"D{row}", item.source)
            set_text(ws_in, f"E{row}", item.note)
        row += 1
    ws_in.column_dimensions["A"].width = 30
    ws_in.column_dimensions["B"].width = 18
    ws_in.column_dimensions["C"].width = 10
    ws_in.column_dimensions["D"].width = 11
    ws_in.column_dimensions["E"].width = 90
    ws_in.freeze_panes = "A6"

    # -- Summary (cells placed first so the step sheets can refer to them) ----------------------
    ws_s = wb.create_sheet("Summary")
    I = inputs.ref
    srows: list = []  # (key, label, Expr|number, unit, python value, note)
    S = {}

    def srow(key, label, value, unit="", check=None, note=""):
        srows.append((key, label, value, unit, check, note))
        S[key] = Expr(f"Summary!$B${len(srows) + 3}")
        return S[key]

    static = sc_r.batching == "static"
    batch = I("batch")
    n_pre = batch if static else XL.maximum(1, XL.minimum(batch, XL.floor(I("prefill_chunk") / I("isl"))))
    srow("n_pre", "requests prefilled together", n_pre, "sequences", proj.prefill_requests,
         "static: the batch; continuous: max(1, min(batch, prefill_chunk // isl))")
    micro = batch / sc_r.pp if sc_r.pp > 1 else batch
    srow("micro", "decode micro-batch", micro, "sequences", None, "batch / pp")
    lo = I("isl")
    hi = I("isl") + XL.maximum(I("osl") - 2, 0)
    srow("ctx_lo", "decode context, first step", lo, "tokens")
    srow("ctx_hi", "decode context, last step", hi, "tokens")
    srow("ctx_mid", "decode context, middle step", (S["ctx_lo"] + S["ctx_hi"]) / 2.0, "tokens")
    steps[0].batch, steps[0].seq = S["n_pre"], I("isl")
    for st, ctx in zip(steps[1:], ("ctx_lo", "ctx_mid", "ctx_hi")):
        st.batch, st.context = S["micro"], S[ctx]
    for st in steps:
        st.total_ref = f"{st.title}!$B$5"
        srow(f"step_{st.key}", f"{st.title} step", Expr(st.total_ref), "s")
    ttft = S["step_prefill"]
    srow("ttft_s", "TTFT", ttft, "s", proj.ttft_s)
    if len(steps) > 1:
        tpot = (S["step_decode_lo"] + 4.0 * S["step_decode_mid"] + S["step_decode_hi"]) / 6.0
    else:
        tpot = 0.0 * ttft
    srow("tpot_s", "TPOT (Simpson mean over the generation)", tpot, "s", proj.tpot_s,
         "(first + 4 x middle + last) / 6")
    e2e = S["ttft_s"] + (I("osl") - 1) * S["tpot_s"]
    srow("e2e_s", "end-to-end latency", e2e, "s", proj.e2e_s, "TTFT + (osl - 1) x TPOT")
    if static:
        thr = batch * I("osl") / S["e2e_s"]
        thr_note = "static: batch x osl / E2E"
    elif sc_r.osl > 1:
        thr = batch / (S["tpot_s"] + batch * (S["ttft_s"] / S["n_pre"]) / I("osl"))
        thr_note = "continuous: batch / (TPOT + batch x (TTFT / n_pre) / osl)"
    else:
        thr = S["n_pre"] / S["ttft_s"]
        thr_note = "one output token: n_pre / TTFT"
    srow("throughput_tok_s", "output throughput (replica)", thr, "tok/s", proj.throughput_tok_s, thr_note)
    srow("throughput_tok_s_per_gpu", "output throughput per GPU", S["throughput_tok_s"] / I("gpus"), "tok/s/GPU",
         proj.throughput_tok_s_per_gpu)
    _energy_rows(srow, S, I, steps, sc_r, proj, static)
    srow("ttft_ms", "TTFT", S["ttft_s"] * 1e3, "ms", proj.ttft_s * 1e3)
    srow("tpot_ms", "TPOT", S["tpot_s"] * 1e3, "ms", proj.tpot_s * 1e3)
    srow("e2e_ms", "end-to-end latency", S["e2e_s"] * 1e3, "ms", proj.e2e_s * 1e3)
    srow("tok_s_user", "tokens/s per user", 1.0 / S["tpot_s"] if len(steps) > 1 else 0.0, "tok/s")
    m = proj.memory
    srow("mem_weights", "memory: weights", I("weights_bytes"), "B", m.weights)
    srow("mem_kv", "memory: KV cache", batch * I("kv_bytes_per_token") * (I("isl") + I("osl")), "B", m.kv_cache)
    srow("mem_act", "memory: activations",
         XL.minimum(batch * I("isl"), I("prefill_chunk")) * I("act_bytes_per_token") + batch * I("logit_bytes_per_seq"),
         "B", m.activations)
    srow("mem_workspace", "memory: workspace", I("mem_reserve"), "B", m.workspace)
    srow("mem_total", "memory: total per GPU", S["mem_weights"] + S["mem_kv"] + S["mem_act"] + S["mem_workspace"],
         "B", m.total)
    fixed_mem = S["mem_weights"] + S["mem_act"] + S["mem_workspace"]
    if total_policy:
        usable = I("hbm_visible_bytes") * I("mem_fraction")
        kv_budget = XL.maximum(usable - fixed_mem, 0.0)
        pool_note = "total policy: mem_fraction x device-visible memory; the KV cache gets what the rest leaves"
    else:
        kv_budget = I("mem_fraction") * XL.maximum(I("hbm_visible_bytes") - fixed_mem, 0.0)
        usable = fixed_mem + kv_budget
        pool_note = "free policy: weights, activations and reserve, plus the KV cache's mem_fraction of what is free"
    srow("mem_kv_budget", "memory: KV-cache budget per GPU", kv_budget, "B", m.kv_budget, pool_note)
    srow("mem_capacity", "memory: usable per GPU", usable, "B", m.capacity, pool_note)
    srow("fits", "fits in memory", S["mem_kv"] <= S["mem_kv_budget"], "", bool(m.fits),
         "the KV cache within its budget")

    set_text(ws_s, "A1", f"Summary: {model.name} on {hw.name}")
    ws_s["A1"].font = title_font
    for i, h in enumerate(("quantity", "value (live)", "unit", "perfmodel at export", "definition", "key"), start=1):
        c = ws_s.cell(row=3, column=i, value=h)
        c.font = bold
        c.fill = head_fill
    for i, (key, label, value, unit, check, note) in enumerate(srows, start=4):
        set_text(ws_s, f"A{i}", label)
        set_formula(ws_s, f"B{i}", value)
        set_text(ws_s, f"C{i}", unit)
        if check is not None:
            ws_s[f"D{i}"] = bool(check) if isinstance(check, bool) else float(check)
        set_text(ws_s, f"E{i}", note)
        set_text(ws_s, f"F{i}", key)
        ws_s[f"B{i}"].number_format = "0.000E+00" if unit in ("s", "B") else "#,##0.000"
        ws_s[f"D{i}"].number_format = ws_s[f"B{i}"].number_format
    ws_s.column_dimensions["A"].width = 42
    ws_s.column_dimensions["B"].width = 18
    ws_s.column_dimensions["D"].width = 20
    ws_s.column_dimensions["E"].width = 60

    # -- step sheets ---------------------------------------------------------------------------
    overlap = I("overlap") if overlap_method in ("none", "fixed") else None
    for st in steps:
        launch = sc_r.launch_for(st.phase)
        eager = launch == "eager" and sc_r.mode != "sol"
        gap = 0.0 if sc_r.mode == "sol" or launch != "graph" else prof_view.launch_graph_s
        ws = wb.create_sheet(st.title)
        ops = _step_ops(model, sc_r, st)
        set_text(ws, "A1", f"{st.title} step: {model.name} on {hw.name}")
        ws["A1"].font = title_font
        set_text(ws, "A2", "sequences in the step (batch)")
        set_formula(ws, "B2", st.batch)
        set_text(ws, "A3", "new tokens per sequence")
        set_formula(ws, "B3", st.seq)
        set_text(ws, "A4", "cached tokens per sequence (context)")
        set_formula(ws, "B4", st.context)
        set_text(ws, "A5", "step latency (operators + launch gaps)")
        set_text(ws, "A6", "of which launch gaps")
        ws["A5"].font = bold
        params: list[str] = []
        for op in ops:
            for k, v in op.params.items():
                if k not in params and (isinstance(v, Expr) or _numeric(v)):
                    params.append(k)
        head = ["operator", "kind", "dtype", "count", "kernels", "flops", "bytes", *params,
                "time_s (one run)", "run_s (overlap, launch)", "total_s (x count)", "launch_gaps_s", "share",
                "ideal compute_s (power)", "dynamic_J (one run, one GPU)"]
        hr = 8
        for i, h in enumerate(head, start=1):
            c = ws.cell(row=hr, column=i, value=h)
            c.font = bold
            c.fill = head_fill
            c.alignment = Alignment(wrap_text=True)
        c_time = 8 + len(params)
        c_run, c_total, c_gap, c_share = c_time + 1, c_time + 2, c_time + 3, c_time + 4
        c_comp = c_share + 1
        c_energy = c_comp + 1
        helper_col = [c_energy + 2]
        # the step's compute-bound time sets the power-limited clock of its GEMMs and attention
        # (perfmodel.cost.time_ops): each compute op's FLOPs at its achievable rate, summed in B7
        sustained = None if sc_r.mode == "sol" else Expr("$B$7")
        set_text(ws, "A7", "sustained compute (sets the power-limited clock)")
        first = hr + 1
        last = hr + len(ops)
        timed: list[_Timed] = []  # (op, its time cell): the overlap model pairs collectives with compute
        for r, op in enumerate(ops, start=first):
            set_text(ws, f"A{r}", op.name)
            set_text(ws, f"B{r}", op.kind)
            set_text(ws, f"C{r}", op.params.get("dtype", ""))
            ws.cell(row=r, column=4, value=float(op.count))
            ws.cell(row=r, column=5, value=float(op.kernels))
            set_formula(ws, f"F{r}", op.flops)
            set_formula(ws, f"G{r}", op.bytes)
            new_params = dict(op.params)
            for j, k in enumerate(params, start=8):
                if k not in op.params:
                    continue
                v = op.params[k]
                if isinstance(v, Expr) or _numeric(v):
                    set_formula(ws, f"{_col(j)}{r}", v)
                if isinstance(v, Expr):
                    new_params[k] = Expr(f"${_col(j)}{r}")
            view = dataclasses.replace(
                op, params=new_params,
                flops=Expr(f"$F{r}") if isinstance(op.flops, Expr) else op.flops,
                bytes=Expr(f"$G{r}") if isinstance(op.bytes, Expr) else op.bytes)
            if sustained is not None and op.kind in COMPUTE_KINDS:
                _write_long(ws, r, c_comp, ideal_compute(view, hw_view, prof_view), helper_col)
                ws.cell(row=r, column=c_comp).number_format = "0.000E+00"
                t = time_op(view, hw_view, prof_view, mode=sc_r.mode, world=sc_r.gpus, xp=XL, sustained=sustained).time
            else:
                t = time_op(view, hw_view, prof_view, mode=sc_r.mode, world=sc_r.gpus, xp=XL).time
            _write_long(ws, r, c_time, t, helper_col)
            set_formula(ws, f"{_col(c_energy)}{r}", _op_energy_formula(view, power, I))
            ws.cell(row=r, column=c_energy).number_format = "0.000E+00"
            run = Expr(f"${_col(c_time)}{r}")
            timed.append(_Timed(view, run))
            if op.kind in COMM_KINDS:
                continue  # written below, once every op's time cell exists
            if eager and op.kind not in COMM_KINDS:
                floor = prof_view.host_floor_s.get(_mem_kind(op)) if isinstance(prof_view.host_floor_s, dict) else None
                run = XL.maximum(run, prof_view.launch_eager_s if floor is None else XL.maximum(prof_view.launch_eager_s, floor))
            set_formula(ws, f"{_col(c_run)}{r}", run)
            set_formula(ws, f"{_col(c_total)}{r}", Expr(f"${_col(c_run)}{r}") * float(op.count))
            set_formula(ws, f"{_col(c_gap)}{r}", gap * float(op.kernels) * float(op.count))
            ws[f"{_col(c_share)}{r}"] = f"=({_col(c_total)}{r}+{_col(c_gap)}{r})/$B$5"
            ws[f"{_col(c_share)}{r}"].number_format = "0.0%"
            for cc in (c_time, c_run, c_total, c_gap):
                ws.cell(row=r, column=cc).number_format = "0.000E+00"
        if overlap is not None:
            comm_runs = [t.time * (1.0 - overlap) if t.op.kind in COMM_KINDS else None for t in timed]
        else:
            comm_runs = exposed_runs(timed, overlap_method, prof_view, hw=hw_view, world=sc_r.gpus, xp=XL)
        for r, (t, run) in enumerate(zip(timed, comm_runs), start=first):
            if run is None:
                continue
            _write_long(ws, r, c_run, run, helper_col)
            set_formula(ws, f"{_col(c_total)}{r}", Expr(f"${_col(c_run)}{r}") * float(t.op.count))
            set_formula(ws, f"{_col(c_gap)}{r}", gap * float(t.op.kernels) * float(t.op.count))
            ws[f"{_col(c_share)}{r}"] = f"=({_col(c_total)}{r}+{_col(c_gap)}{r})/$B$5"
            ws[f"{_col(c_share)}{r}"].number_format = "0.0%"
            for cc in (c_time, c_run, c_total, c_gap):
                ws.cell(row=r, column=cc).number_format = "0.000E+00"
        ws["B5"] = f"=SUM({_col(c_total)}{first}:{_col(c_total)}{last})+SUM({_col(c_gap)}{first}:{_col(c_gap)}{last})"
        ws["B6"] = f"=SUM({_col(c_gap)}{first}:{_col(c_gap)}{last})"
        ws["B7"] = f"=SUMPRODUCT({_col(c_comp)}{first}:{_col(c_comp)}{last},D{first}:D{last})"
        set_text(ws, "D2", "dynamic energy of the step, one GPU (J, before the power limit)")
        ws["E2"] = f"=SUMPRODUCT({_col(c_energy)}{first}:{_col(c_energy)}{last},D{first}:D{last})"
        ws["E2"].number_format = "0.000E+00"
        ws["B7"].number_format = "0.000E+00"
        ws["B5"].number_format = ws["B6"].number_format = "0.000E+00"
        ws.column_dimensions["A"].width = 22
        ws.freeze_panes = ws.cell(row=first, column=2)

    # -- Sweep ---------------------------------------------------------------------------------
    _sweep_sheet(wb, hw, model, sc, prof, sweep, bold, head_fill)

    # -- About ---------------------------------------------------------------------------------
    ws_a = wb.create_sheet("About")
    lines = [("perfmodel what-if workbook", ""), ("tool", f"perfmodel {__version__}"),
             ("command", command_line(argv)), ("hardware", f"{hw.name} ({hw.key}), sha256 {hw.sha256}")]
    lines += [("spec file", f"{f['path']} sha256 {f['sha256']}") for f in spec_files(hw)]
    lines += [("model", f"{model.name} ({model.key})"), ("calibration", prof.label),
              ("calibration validation", _validation_text(prof))]
    lines += [("assumption", a) for a in proj.assumptions]
    lines += [("how", "Each operator's time formula is generated by running perfmodel's cost model code "
                      "(perfmodel.cost.time_op) on Excel expressions: shapes come from perfmodel.graph.build_ops "
                      "with cell references for batch, tokens and context; hardware figures and latency-model "
                      "parameters are references to the Inputs sheet. Totals follow perfmodel.projection."),
              ("sweep", "The Sweep sheet holds values computed by perfmodel at export (not live formulas).")]
    for i, (k, v) in enumerate(lines, start=1):
        set_text(ws_a, f"A{i}", k)
        set_text(ws_a, f"B{i}", v)
    ws_a["A1"].font = title_font
    ws_a.column_dimensions["A"].width = 22
    ws_a.column_dimensions["B"].width = 140

    wb.active = 1  # open on the Summary
    return wb


def _max_batch_formula(I, total_policy: bool, capped: bool):
    """The largest batch that fits, as :func:`perfmodel.capacity.max_batch` finds it, as a formula of the
    Inputs sheet: solved for a prefill chunk not yet full (activations grow with the batch) and for a full
    one, the larger consistent answer kept, then the engine's scheduler limit."""
    V, f = I("hbm_visible_bytes"), I("mem_fraction")
    kv_seq = I("kv_bytes_per_token") * (I("isl") + I("osl"))
    base = I("weights_bytes") + I("mem_reserve")
    widest, logits, chunk = I("act_bytes_per_token"), I("logit_bytes_per_seq"), I("prefill_chunk")

    def solve(fixed, per_seq_act):
        if total_policy:
            return XL.floor(XL.maximum(V * f - fixed, 0.0) / (kv_seq + per_seq_act))
        return XL.floor(XL.maximum(f * (V - fixed), 0.0) / (kv_seq + f * per_seq_act))

    filling = solve(base, logits + I("isl") * widest)
    filling = XL.where(filling * I("isl") <= chunk, filling, 0.0)
    full = solve(base + chunk * widest, logits)
    full = XL.where(full * I("isl") >= chunk, full, 0.0)
    best = XL.maximum(filling, full)
    return XL.minimum(best, I("max_batch")) if capped else best


def _write_long(ws, r: int, col: int, t, helper_col: list[int]) -> None:
    """Write the time formula; if it would pass Excel's limit, move repeated parts into helper cells to the
    right of the table (same row)."""
    if not isinstance(t, Expr):
        ws.cell(row=r, column=col, value=float(t))
        return
    text = t.text

    def new_ref():
        c = helper_col[0]
        helper_col[0] += 1
        ws.cell(row=7, column=c, value="helper")
        return f"${_col(c)}{r}"

    short, helpers = hoist(text, new_ref, MAX_FORMULA)
    for ref, sub in helpers:
        ws[ref.replace("$", "")] = "=" + sub
    ws.cell(row=r, column=col, value="=" + short)


def _profile_unit(fname: str) -> str:
    if fname.endswith("_s"):
        return "s"
    if fname in ("gemm_eta", "attn_eta"):  # may pass 1: datasheet rates are quoted below max boost clock
        return "x datasheet dense rate"
    if "eta" in fname:
        return "x bandwidth"
    return ""


def _validation_text(prof: Profile) -> str:
    v = prof.validation
    if not v:
        return "none (not fitted)" if not prof.fitted else "no held-out validation recorded"
    from .common import validation_text

    return validation_text(v)


def _sweep_sheet(wb, hw, model, sc, prof, sweep, bold, head_fill) -> None:
    from .sweep import default_batch_sweep

    ws = wb.create_sheet("Sweep")
    res = sweep if sweep is not None else default_batch_sweep(hw, model, sc, prof)
    set_text(ws, "A1", "Sweep: values computed by perfmodel at export (vectorised model; not live formulas)")
    ws["A1"].font = bold
    set_text(ws, "A2", res.description)
    cols = res.columns
    for i, h in enumerate(cols, start=1):
        c = ws.cell(row=4, column=i, value=h)
        c.font = bold
        c.fill = head_fill
    for r, row in enumerate(res.rows(), start=5):
        for i, h in enumerate(cols, start=1):
            v = row[h]
            if isinstance(v, str):
                set_text(ws, f"{_col(i)}{r}", v)
            else:
                ws.cell(row=r, column=i, value=v)


def workbook_bytes(hw, model, sc, prof, *, sweep=None, argv=None) -> bytes:
    wb = build_workbook(hw, model, sc, prof, sweep=sweep, argv=argv)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------------
# CSV: flat tables for loading elsewhere (values, not formulas)
# ---------------------------------------------------------------------------------------------------


def csv_tables(hw, model, sc, prof) -> dict[str, str]:
    """{suffix: csv text} for the per-op table, the summary and the inputs."""
    from ..io import csv_text as table
    from ..projection import project_resolved
    from ..serialize import projection_dict

    p = project_resolved(hw, model, sc, prof)
    d = projection_dict(p)

    ops = []
    for ph in (p.prefill, p.decode):
        if ph is None:
            continue
        for t in ph.times:
            o = t.op
            ops.append([hw.key, ph.name, o.name, o.kind, o.params.get("dtype", ""), float(o.count), float(o.flops),
                        float(o.bytes), float(t.time) * 1e3, float(t.total) * 1e3, str(t.bound)])
    out = {"ops": table(["arch", "phase", "operator", "kind", "dtype", "count", "flops", "bytes", "time_ms",
                         "total_ms", "bound"], ops)}
    keys = ["ttft_ms", "tpot_ms", "e2e_ms", "throughput_tok_s", "throughput_tok_s_per_gpu", "mfu", "mbu"]
    out["summary"] = table(["arch", "name", "model", "batch", *keys, "bound_prefill", "bound_decode", "calibration"],
                           [[hw.key, hw.name, model.name, p.batch, *[d[k] for k in keys], d["bound"]["prefill"],
                             d["bound"]["decode"] or "", prof.label]])
    rows = [["scenario", k, v, "", "scenario", ""] for k, v in d["scenario"].items()]
    for f, v in _hw_fields(hw):
        fig = hw.figures.get(f.path)
        rows.append(["hardware", f.attr, v, field_unit(f), fig.source if fig else "derived",
                     (fig.ref if fig else "")])
    for name, v, _, _ in profile_inputs(prof):
        rows.append(["latency_model", name, v, _profile_unit(name.split("[")[0]), prof.label, ""])
    out["inputs"] = table(["group", "name", "value", "unit", "source", "ref"], rows)
    return out

