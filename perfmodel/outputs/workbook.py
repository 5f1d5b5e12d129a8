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
- how each step's operators add up (collective overlap, eager host floor, launch gaps) is
  :func:`perfmodel.step_accounting.account` on those time cells, one column per
  :data:`~perfmodel.step_accounting.PARTS` and the step's total from
  :func:`~perfmodel.step_accounting.step_time` over their sums;
- the serving formulas (requests prefilled together, the decode micro-batch and contexts, TPOT by Simpson's
  rule with any speculative draft, end-to-end latency, throughput) are
  :func:`perfmodel.projection.serving_steps`, :func:`~perfmodel.projection.decode_mean` and
  :func:`~perfmodel.projection.serving_rates`, and the memory rows :func:`perfmodel.capacity.memory` and
  :func:`~perfmodel.capacity.max_batch`, each run on a copy of the scenario whose live fields are cells.

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

import numpy as np

from .. import __version__, capacity
from ..cost import demand_seconds, time_estimate, time_op
from ..cost.backend import XL, Expr, formula
from ..cost.overlap import resolve_method
from ..errors import InputError
from ..energy.model import limit_w, power_params
from ..energy.report import power_source
from ..graph import Step, build_ops
from ..host_costs import host_rules, request_overhead_s
from ..models import Model
from ..ops import COMM_KINDS, COMPUTE_KINDS
from ..profile import Profile
from ..projection import (batch_cap, decode_mean, draft_time, drafting_time, project_resolved, serving_rates,
                          serving_steps)
from ..resolve import resolve_scenario
from ..scenario import Scenario
from ..spec import SPEC_FIELDS, HardwareSpec, spec_value
from ..step_accounting import PARTS, Rules, account, scheduled_step, step_time
from ..speculative import mtp_scenario
from .common import command_line, field_unit, set_text, spec_files

MAX_FORMULA = 8000  # Excel's limit is 8192 characters; keep a margin
INPUT_SHEET = "Inputs"


# ---------------------------------------------------------------------------------------------------
# Cells
# ---------------------------------------------------------------------------------------------------


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
    """Every parenthesised expression or function call in ``text``, innermost first (by closing parenthesis).
    A parenthesis without a function name before it and with a comma at its own depth is an argument list,
    not an expression. Balanced text (every formula the workbook writes) is parsed with array operations: a
    formula is re-parsed each time a group is hoisted out of it, and the token loop made a DeepSeek-V3
    workbook take 6 s; :func:`_groups_scan` (the same list) parses the rest."""
    spans = _group_spans(text)
    if spans is None:
        return _groups_scan(text)
    return [text[a:b] for a, b in spans]


def _group_spans(text: str) -> list[tuple[int, int]] | None:
    """(start, end) of each group of :func:`_groups`, or None when the parentheses do not balance."""
    c = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # one code point per str index
    is_open, is_close = c == 40, c == 41
    depth = np.cumsum(is_open.astype(np.int64) - is_close)  # the depth after each character
    if not is_open.any():
        return None if is_close.any() else []
    if depth[-1] != 0 or depth.min() < 0:
        return None
    opens, closes = np.flatnonzero(is_open), np.flatnonzero(is_close)
    # at each depth, opens and closes alternate in text order: the k-th of each (by depth, place) make a pair
    level = depth[opens]
    paren, close = opens[np.lexsort((opens, level))], closes[np.lexsort((closes, depth[closes] + 1))]
    level = depth[paren]
    # a function name: the run of letters and underscores right before the parenthesis (as [A-Za-z_]*\( finds)
    named = ((c >= 65) & (c <= 90)) | ((c >= 97) & (c <= 122)) | (c == 95)
    other = np.flatnonzero(~named)
    start = np.concatenate(([-1], other))[np.searchsorted(other, paren)] + 1
    # commas at the group's own depth, counted by (depth, place) keys
    commas = np.flatnonzero(c == 44)
    key = np.sort(depth[commas] * (len(c) + 1) + commas)
    base = level * (len(c) + 1)
    own = np.searchsorted(key, base + close) - np.searchsorted(key, base + paren)
    keep = ~((start == paren) & (own > 0))
    order = np.argsort(close[keep], kind="stable")
    return list(zip(start[keep][order].tolist(), (close[keep][order] + 1).tolist()))


def _groups_scan(text: str) -> list[str]:
    """:func:`_groups` by one pass over the parentheses and commas: each open parenthesis remembers whether a
    comma stood at its own depth."""
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
    from openpyxl.styles import Font, PatternFill

    sc = resolve_scenario(sc, hw, model)  # as asked or as resolved by the command (perfmodel.resolve)
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
    inputs.add("mem_fraction", sc_r.mem_fraction, "fraction", "engine", {
        "free": "share of the memory free after weights, activations and reserve that the KV cache takes",
        "static": "share of device-visible memory the weights, reserve and KV cache take (activations outside)"}.get(
        sc_r.mem_policy, "share of device-visible memory the engine uses"))
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
                               "mem_fraction of the device), static (weights and KV cache within it, activations "
                               "outside) or free (the KV cache takes mem_fraction of what is free)"),
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
    fp = capacity.footprint(model, sc_r)
    inputs.section("Memory per GPU, from the model structure (fixed at export)")
    inputs.add("weights_bytes", fp.weights, "B", "derived", "weights on the fullest GPU", editable=False)
    inputs.add("kv_bytes_per_token", fp.kv_per_token, "B", "derived",
               "KV cache one token adds on one GPU, every layer keeping it (a sliding-window or chunked layer keeps "
               "at most its window: perfmodel.capacity.kv_bytes_per_sequence)", editable=False)
    inputs.add("act_bytes_per_token", fp.act_per_token, "B", "derived",
               "widest live activations per prefill token", editable=False)
    inputs.add("logit_bytes_per_seq", fp.logits_per_sequence, "B", "derived",
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
    if sc_r.draft is not None:
        raise InputError("the workbook prices speculation with the model's own MTP layers only, not a separate "
                         "draft model (perfmodel project prices both)", field="--draft")
    if sc_r.tree:
        raise InputError("the workbook prices a chain of draft tokens, not a token tree (perfmodel project prices "
                         "both)", field="--spec-topk" if sc_r.spec_topk > 1 else "--spec-verify")
    seq = 1 + sc_r.mtp  # a decode step verifies the draft tokens too
    steps = [
        StepSheet("prefill", "Prefill", "prefill", Expr(""), Expr(""), 0),
        StepSheet("decode_lo", "Decode_start", "decode", Expr(""), seq, Expr("")),
        StepSheet("decode_mid", "Decode_mid", "decode", Expr(""), seq, Expr("")),
        StepSheet("decode_hi", "Decode_end", "decode", Expr(""), seq, Expr("")),
    ]
    if sc_r.osl <= 1:
        steps = steps[:1]
    elif sc_r.mtp:  # one draft token's step: its decoder layer and LM head make the draft's time
        steps.append(StepSheet("draft", "Draft", "decode", Expr(""), 1, Expr("")))
    plain = _probe_plain_profile_fields(model, sc_r, hw, prof, steps)
    inputs.section(f"Latency model parameters: {prof.label}")
    for name, v, fname, _ in profile_inputs(prof):
        fixed = fname in plain
        inputs.add(name, v, _profile_unit(fname), "fitted" if prof.fitted else "default",
                   (prof.description if not fixed else "used as a plain number by the cost code (fixed at export)"),
                   editable=not fixed)

    # views: the spec, profile, scenario and footprint with every live figure a reference to its Inputs cell
    hw_view, prof_view = _views(hw, prof, inputs, plain)
    I = inputs.ref
    live = {k: I(k) for k in ("isl", "osl", "prefill_chunk", "mem_fraction", "mem_reserve")}
    if sc_r.max_batch:
        live["max_batch"] = I("max_batch")
    sc_view = dataclasses.replace(sc_r, **live)
    fp_view = capacity.Footprint(I("weights_bytes"), I("kv_bytes_per_token"), I("act_bytes_per_token"),
                                 I("logit_bytes_per_seq"))
    if batch_max:
        inputs.by_name["batch"].value = batch_cap(capacity.max_batch(model, sc_view, hw_view, xp=XL, fp=fp_view),
                                                  sc_view, XL)

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
    srows: list = []  # (key, label, Expr|number, unit, python value, note)
    S = {}

    def srow(key, label, value, unit="", check=None, note=""):
        srows.append((key, label, value, unit, check, note))
        S[key] = Expr(f"Summary!$B${len(srows) + 3}")
        return S[key]

    static = sc_r.batching == "static"
    batch = I("batch")
    plan = serving_steps(sc_view, batch, XL, decode=sc_r.osl > 1)  # perfmodel.projection's steps, on cells
    srow("n_pre", "requests prefilled together", plan.n_pre, "sequences", proj.prefill_requests,
         "static: the batch; continuous: max(1, min(batch, prefill_chunk // isl)) in each attention group")
    srow("micro", "decode micro-batch", plan.micro, "sequences", None, "batch / pp")
    steps[0].batch, steps[0].seq = S["n_pre"], plan.prefill.seq
    if plan.decode:
        lo, mid, hi = plan.decode
        srow("ctx_lo", "decode context, first step", lo.context, "tokens")
        srow("ctx_hi", "decode context, last step", hi.context, "tokens")
        srow("ctx_mid", "decode context, middle step", mid.context, "tokens")
        for st, ctx in zip(steps[1:], ("ctx_lo", "ctx_mid", "ctx_hi", "ctx_mid")):  # the draft at the middle
            st.batch, st.context = S["micro"], S[ctx]
    for st in steps:
        st.total_ref = f"{st.title}!$B$5"
        if st.key != "draft":
            srow(f"step_{st.key}", f"{st.title} step", Expr(st.total_ref), "s")

    # -- step sheets ---------------------------------------------------------------------------
    overlap_method, _ = resolve_method(sc_r.overlap)
    timed_by_key = {}
    for st in steps:
        rules = Rules.of(sc_r, st.phase, **host_rules(sc_r, prof))
        if overlap_method in ("none", "fixed"):  # the hidden fraction is a live input
            rules = dataclasses.replace(rules, overlap="fixed", fraction=I("overlap"))
        sc_st = mtp_scenario(model, sc_r) if st.key == "draft" else sc_r  # the MTP layer in its checkpoint's format
        timed_by_key[st.key] = _step_sheet(wb, st, model, hw, sc_st, hw_view, prof_view, rules, power, I,
                                           (title_font, bold, head_fill),
                                           ratios=_table_ratios(model, hw, sc_st, prof, st.key))

    # -- serving and memory (perfmodel.projection and perfmodel.capacity on cells) ----------------
    srow("request_s", "a request's first token beyond its prefill step", request_overhead_s(sc_r, hw, model, prof),
         "s", None, "its return to the host (a serving engine), or the framework's own setup (transformers' "
         "generate()): perfmodel.host_costs")
    ttft = srow("ttft_s", "TTFT", S["step_prefill"] + S["request_s"], "s", proj.ttft_s, "prefill step + request")
    if plan.decode:
        draft_s = None
        if sc_r.mtp:
            one = srow("draft_s", "draft token: a decoder layer and the LM head", draft_time(
                timed_by_key["draft"], model.layers), "s", None, f"{sc_r.mtp} a step, before the verify step")
            draft_s = drafting_time(sc_r, one)
        tpot = decode_mean(sc_view, S["step_decode_lo"], S["step_decode_mid"], S["step_decode_hi"], draft_s=draft_s)
        tpot_note = "(first + 4 x middle + last) / 6" + (
            f"; with the draft tokens' time, per {sc_r.tokens_per_step:.3f} tokens a step" if sc_r.mtp else "")
    else:
        tpot, tpot_note = 0.0 * ttft, ""
    tpot = srow("tpot_s", "TPOT (Simpson mean over the generation)", tpot, "s", proj.tpot_s, tpot_note)
    e2e, thr = serving_rates(sc_view, batch, S["n_pre"], ttft, tpot, decode=bool(plan.decode))
    srow("e2e_s", "end-to-end latency", e2e, "s", proj.e2e_s, "TTFT + (osl - 1) x TPOT")
    if static:
        thr_note = "static: batch x osl / E2E"
    elif plan.decode:
        thr_note = "continuous: batch / (TPOT + batch x (TTFT / n_pre) / osl)"
    else:
        thr_note = "one output token: n_pre / TTFT"
    srow("throughput_tok_s", "output throughput (replica)", thr, "tok/s", proj.throughput_tok_s, thr_note)
    srow("throughput_tok_s_per_gpu", "output throughput per GPU", S["throughput_tok_s"] / I("gpus"), "tok/s/GPU",
         proj.throughput_tok_s_per_gpu)
    _energy_rows(srow, S, I, steps, sc_r, proj, static)
    srow("ttft_ms", "TTFT", S["ttft_s"] * 1e3, "ms", proj.ttft_s * 1e3)
    srow("tpot_ms", "TPOT", S["tpot_s"] * 1e3, "ms", proj.tpot_s * 1e3)
    srow("e2e_ms", "end-to-end latency", S["e2e_s"] * 1e3, "ms", proj.e2e_s * 1e3)
    srow("tok_s_user", "tokens/s per user", 1.0 / S["tpot_s"] if plan.decode else 0.0, "tok/s")
    m = proj.memory
    mem = capacity.memory(model, sc_view, batch, hw_view, xp=XL, fp=fp_view)
    cells = dataclasses.replace(mem, weights=srow("mem_weights", "memory: weights", mem.weights, "B", m.weights),
                                kv_cache=srow("mem_kv", "memory: KV cache", mem.kv_cache, "B", m.kv_cache,
                                              "batch x KV bytes per sequence of isl + osl tokens (windowed layers "
                                              "keep at most their window)"),
                                activations=srow("mem_act", "memory: activations", mem.activations, "B",
                                                 m.activations),
                                workspace=srow("mem_workspace", "memory: workspace", mem.workspace, "B", m.workspace))
    srow("mem_total", "memory: total per GPU", cells.total, "B", m.total)
    pool_note = {
        "free": "free policy: weights, activations and reserve, plus the KV cache's mem_fraction of what is free",
        "static": "static policy: mem_fraction x device-visible memory holds weights, reserve and the KV cache; "
                  "activations beside it"}.get(sc_r.mem_policy, "total policy: mem_fraction x device-visible memory; "
                                                              "the KV cache gets what the rest leaves")
    cells = dataclasses.replace(cells, kv_budget=srow("mem_kv_budget", "memory: KV-cache budget per GPU",
                                                      mem.kv_budget, "B", m.kv_budget, pool_note))
    srow("mem_capacity", "memory: usable per GPU", mem.capacity, "B", m.capacity, pool_note)
    srow("fits", "fits in memory", cells.fits, "", bool(m.fits), "the KV cache within its budget")

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
                      "parameters are references to the Inputs sheet. The totals are perfmodel.step_accounting "
                      "(a step), perfmodel.projection (serving) and perfmodel.capacity (memory), run on those cells "
                      "the same way."),
              ("sweep", "The Sweep sheet holds values computed by perfmodel at export (not live formulas).")]
    for i, (k, v) in enumerate(lines, start=1):
        set_text(ws_a, f"A{i}", k)
        set_text(ws_a, f"B{i}", v)
    ws_a["A1"].font = title_font
    ws_a.column_dimensions["A"].width = 22
    ws_a.column_dimensions["B"].width = 140

    wb.active = 1  # open on the Summary
    return wb


# Column titles of the step sheets for the parts of a step (perfmodel.step_accounting.PARTS; a part without one
# is titled by its name).
PART_TITLES = {"busy": "total_s (x count)", "gaps": "launch_gaps_s"}


def _table_ratios(model, hw, sc_r, prof, key: str) -> list[tuple[str, float]]:
    """Per op of a step sheet, the part's own measured table's anchor ratio at the exported shapes
    (:func:`perfmodel.cost.table_ratio`; 1 where no table covers the op): a constant the op's formula is
    multiplied by, so the workbook agrees with the projection at the exported shapes and its formulas stay live
    (the ratio itself stays fixed when a shape cell changes)."""
    from ..cost import table_ratio

    plan = serving_steps(sc_r, sc_r.batch)
    step = {"prefill": plan.prefill, "draft": plan.draft,
            **dict(zip(("decode_lo", "decode_mid", "decode_hi"), plan.decode))}.get(key)
    if step is None:
        return []
    out = []
    for op in build_ops(model, step, sc_r):
        r = table_ratio(op, hw, prof) if sc_r.mode != "sol" else None
        out.append((op.name, 1.0 if r is None else float(r)))
    return out


def _step_sheet(wb, st: StepSheet, model, hw, sc_r, hw_view, prof_view, rules, power, I, styles,
                ratios: list[tuple[str, float]] = ()) -> list:
    """One step's sheet: a row per operator, its shape quantities, its time for one run (the cost model on
    cells), then :func:`perfmodel.step_accounting.account` of those time cells: each run after overlap and the
    host floor, one column per part of the step, its share; B5 the step's time. Returns the ops with their time
    cells (sheet-qualified), for formulas over them elsewhere."""
    from openpyxl.styles import Alignment  # openpyxl is optional: build_workbook checked it is there

    title_font, bold, head_fill = styles
    ws = wb.create_sheet(st.title)
    ops = _step_ops(model, sc_r, st)
    if [name for name, _ in ratios] != [op.name for op in ops]:
        ratios = [(op.name, 1.0) for op in ops]  # the exported shapes' ops are not these: no constant to apply
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
            "time_s (one run)", "run_s (overlap, launch)", *(PART_TITLES.get(p, f"{p}_s") for p in PARTS), "share",
            "power demand x s (clock)", "time estimate_s (clock)", "dynamic_J (one run, one GPU)"]
    hr = 8
    for i, h in enumerate(head, start=1):
        c = ws.cell(row=hr, column=i, value=h)
        c.font = bold
        c.fill = head_fill
        c.alignment = Alignment(wrap_text=True)
    c_time = 8 + len(params)
    c_run = c_time + 1
    c_part = {p: c_run + 1 + i for i, p in enumerate(PARTS)}
    c_share = c_run + 1 + len(PARTS)
    c_comp = c_share + 1
    c_est = c_comp + 1
    c_energy = c_est + 1
    helper_col = [c_energy + 2]
    # the step's power demand sets the power-limited clock of its GEMMs and attention (perfmodel.cost.step_demand):
    # each op's demand-seconds over its estimated seconds, time-weighted in B7
    sustained = None if sc_r.mode == "sol" else Expr("$B$7")
    set_text(ws, "A7", "power demand of the step (sets the power-limited clock, perfmodel.power_clock)")
    first = hr + 1
    last = hr + len(ops)
    timed: list[_Timed] = []  # (op, its time cell): what the step's account reads
    for r, op in enumerate(ops, start=first):
        set_text(ws, f"A{r}", op.name)
        set_text(ws, f"B{r}", op.kind)
        set_text(ws, f"C{r}", op.params.get("dtype", ""))
        ws.cell(row=r, column=4, value=float(op.count))
        set_formula(ws, f"E{r}", op.kernels)  # a formula where the count depends on the shape (split-K)
        kernels = Expr(f"$E{r}") if isinstance(op.kernels, Expr) else op.kernels
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
            op, params=new_params, kernels=kernels,
            flops=Expr(f"$F{r}") if isinstance(op.flops, Expr) else op.flops,
            bytes=Expr(f"$G{r}") if isinstance(op.bytes, Expr) else op.bytes)
        if sustained is not None and op.kind not in COMM_KINDS:
            _write_long(ws, r, c_comp, demand_seconds(view, hw_view, prof_view), helper_col)
            _write_long(ws, r, c_est, time_estimate(view, hw_view, prof_view, XL), helper_col)
            for cc in (c_comp, c_est):
                ws.cell(row=r, column=cc).number_format = "0.000E+00"
        if sustained is not None and op.kind in COMPUTE_KINDS:
            t = time_op(view, hw_view, prof_view, mode=sc_r.mode, world=sc_r.gpus, xp=XL, sustained=sustained).time
        else:
            t = time_op(view, hw_view, prof_view, mode=sc_r.mode, world=sc_r.gpus, xp=XL).time
        ratio = ratios[r - first][1]
        if ratio != 1.0:  # the part's own measured table at the exported shape (_table_ratios)
            t = t * ratio
        _write_long(ws, r, c_time, t, helper_col)
        set_formula(ws, f"{_col(c_energy)}{r}", _op_energy_formula(view, power, I))
        ws.cell(row=r, column=c_energy).number_format = "0.000E+00"
        timed.append(_Timed(view, Expr(f"${_col(c_time)}{r}")))
    # how the ops add up (perfmodel.step_accounting), on the time cells: a collective's run needs every op's time
    # cell
    acc = account(timed, rules, prof_view, hw=hw_view, world=sc_r.gpus, xp=XL)
    for r, share in enumerate(acc.ops, start=first):
        _write_long(ws, r, c_run, share.run, helper_col)
        parts = share.with_run(Expr(f"${_col(c_run)}{r}")).parts()
        for p, c in c_part.items():
            set_formula(ws, f"{_col(c)}{r}", parts[p])
        ws[f"{_col(c_share)}{r}"] = formula(step_time({p: Expr(f"{_col(c)}{r}") for p, c in c_part.items()})
                                            / Expr("$B$5"))
        ws[f"{_col(c_share)}{r}"].number_format = "0.0%"
        for cc in (c_time, c_run, *c_part.values()):
            ws.cell(row=r, column=cc).number_format = "0.000E+00"
    sums = {p: Expr(f"SUM({_col(c)}{first}:{_col(c)}{last})") for p, c in c_part.items()}
    # + an eager framework's own host work a step, and the serving engine's for the step's sequences (B2)
    ws["B5"] = formula(scheduled_step(step_time(sums, acc.serial_s), sc_r, Expr("$B$2"), XL))
    ws["B6"] = formula(sums["gaps"])
    ws["B7"] = (f"=SUMPRODUCT({_col(c_comp)}{first}:{_col(c_comp)}{last},D{first}:D{last})"
                f"/MAX(SUMPRODUCT({_col(c_est)}{first}:{_col(c_est)}{last},D{first}:D{last}),1E-12)")
    set_text(ws, "D2", "dynamic energy of the step, one GPU (J, before the power limit)")
    ws["E2"] = f"=SUMPRODUCT({_col(c_energy)}{first}:{_col(c_energy)}{last},D{first}:D{last})"
    ws["E2"].number_format = "0.000E+00"
    ws["B7"].number_format = "0.000E+00"
    ws["B5"].number_format = ws["B6"].number_format = "0.000E+00"
    ws.column_dimensions["A"].width = 22
    ws.freeze_panes = ws.cell(row=first, column=2)
    return [_Timed(t.op, Expr(f"{ws.title}!{t.time.text}")) for t in timed]


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
    from ..serialize import projection_dict

    p = project_resolved(hw, model, resolve_scenario(sc, hw, model), prof)
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

