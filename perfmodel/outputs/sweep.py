"""Sweeps: a grid of hardware figures and scenario values, evaluated vectorised.

``--vary FIELD=START:STOP:COUNT`` (COUNT evenly spaced values, units as in spec files: ``4TB/s:12TB/s:9``) or
``--vary FIELD=V1,V2,...``. Hardware figures (any numeric spec attribute: hbm_bandwidth, sm_count, hbm_bytes,
scaleup_bandwidth, tensor_flops.bf16, ...; or its name in a spec file: memory.bandwidth, ...) and the batch
(integers and ``max``, resolved per hardware point by :func:`perfmodel.capacity.max_batch`) travel as numpy arrays
through :func:`perfmodel.spec.spec_with` and :func:`perfmodel.projection.serving_times` in one evaluation. Scenario
fields that shape the operator graph (isl, osl, tp, pp, ep, dtype, ...) and the scale-up domain are looped over,
each combination again vectorised over the rest.
"""
from __future__ import annotations

import difflib
import itertools
from dataclasses import dataclass, field

import numpy as np

from ..errors import InputError
from ..inputs import number
from ..resolve import resolve_scenario
from ..spec import SPEC_FIELDS

METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "throughput_tok_s", "throughput_tok_s_per_gpu")
SCENARIO_INT = ("isl", "osl", "tp", "pp", "ep", "prefill_chunk")
SCENARIO_FLOAT = ("overlap", "mem_fraction")
SCENARIO_TEXT = ("dtype", "kv_dtype", "act_dtype", "batching", "launch", "mode", "engine")
_SPEC = {f.attr: f for f in SPEC_FIELDS}
LOOPED_SPEC = ("scaleup_domain",)  # decides which collective formula applies: a plain number
FIELDS = tuple(_SPEC) + ("batch",) + SCENARIO_INT + SCENARIO_FLOAT + SCENARIO_TEXT
BY_YAML_PATH = {f.path: f.attr for f in SPEC_FIELDS}  # memory.bandwidth -> hbm_bandwidth


@dataclass
class Axis:
    field: str
    values: list  # SI floats (spec), ints, 'max' (batch) or text
    text: str = ""

    @property
    def vectorised(self) -> bool:
        return self.field == "batch" or (self.field in _SPEC and self.field not in LOOPED_SPEC)

    @property
    def column(self) -> str:
        return "batch_requested" if self.field == "batch" else self.field


def _err(msg: str, text: str) -> InputError:
    return InputError(f"{msg} (in {text!r}); expected FIELD=START:STOP:COUNT or FIELD=V1,V2,...", field="--vary")


def _dimension(name: str) -> str:
    if name in _SPEC:
        return _SPEC[name].dimension
    return "count"


def _integer(name: str) -> bool:
    return name in ("sm_count", "scaleup_domain", "batch") or name in SCENARIO_INT


def _one(name: str, raw: str, text: str):
    from ..units import parse_quantity

    raw = raw.strip()
    if not raw:
        raise _err("empty value", text)
    if name in SCENARIO_TEXT:
        return raw
    if name == "batch" and raw == "max":
        return "max"
    dim = _dimension(name)
    try:
        v = parse_quantity(raw, dim if dim != "count" else "count")
    except InputError as e:
        raise _err(f"{name}: {e.detail}", text) from None
    if not np.isfinite(v):
        raise _err(f"{name}: expected a finite number, got {raw!r}", text)
    if name in SCENARIO_FLOAT:
        if not 0.0 <= v <= 1.0:
            raise _err(f"{name}: expected a fraction in [0, 1], got {raw!r}", text)
        return float(v)
    try:  # positive; a count a whole number that fits an integer (batch=1e308 had overflowed numpy)
        return number(v, name, lo=0.0, lo_open=True, integer=_integer(name))
    except InputError as e:
        raise _err(f"{name}: {e.detail.replace(repr(v), repr(raw))}", text) from None


def parse_vary(text: str) -> Axis:
    """``FIELD=START:STOP:COUNT`` or ``FIELD=V1,V2,...`` -> an :class:`Axis`. Bad text: a one-line InputError."""
    if "=" not in text:
        raise _err("missing '='", text)
    name, rest = (s.strip() for s in text.split("=", 1))
    name = BY_YAML_PATH.get(name, name)  # a spec file's name of a figure (memory.bandwidth) is its field's too
    if name not in FIELDS:
        names = list(FIELDS) + list(BY_YAML_PATH)
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}? " if close else ""
        spec = ", ".join(f"{f.attr} ({f.path})" for f in SPEC_FIELDS)
        rest_fields = ", ".join(f for f in FIELDS if f not in _SPEC)
        raise InputError(f"{name!r} cannot be varied; {hint}expected a spec figure, by its field or its name in a "
                         f"spec file: {spec}; or {rest_fields}", field="--vary")
    if ":" in rest:
        parts = rest.split(":")
        if len(parts) != 3:
            raise _err("a range is START:STOP:COUNT", text)
        if name in SCENARIO_TEXT or "max" in parts[:2]:
            raise _err(f"{name}: a range needs numbers; list the values with commas", text)
        start, stop = _one(name, parts[0], text), _one(name, parts[1], text)
        try:
            count = int(parts[2])
        except ValueError:
            raise _err(f"COUNT must be a whole number, got {parts[2]!r}", text) from None
        if not 1 <= count <= 100_000:
            raise _err(f"COUNT must be between 1 and 100000, got {count}", text)
        vals = list(np.linspace(float(start), float(stop), count))
        if _integer(name):
            vals = list(dict.fromkeys(int(round(v)) for v in vals))  # rounded, duplicates dropped, in order
        else:
            vals = [float(v) for v in vals]
    else:
        vals = [_one(name, v, text) for v in rest.split(",")]
    return Axis(name, vals, text)


MAX_POINTS = 1_000_000  # about 10 s and 60 MB of results; a CSV of this many rows is already ~150 MB


def check_grid(axes: list[Axis], *, parts: int = 1) -> int:
    """The number of points the grid spans (times ``parts`` hardware specs); a one-line InputError past
    :data:`MAX_POINTS`, before anything is allocated."""
    n = parts
    for a in axes:
        n *= max(len(a.values), 1)
    if n > MAX_POINTS:
        sizes = " x ".join([str(len(a.values)) for a in axes] + ([f"{parts} parts"] if parts > 1 else []))
        raise InputError(f"the grid has {n:,} points ({sizes}); at most {MAX_POINTS:,} are evaluated: give fewer "
                         f"values", field="--vary")
    return n


@dataclass
class SweepResult:
    axes: list[Axis]
    metrics: dict[str, np.ndarray]  # each of METRICS, shaped like the grid
    batch: np.ndarray  # resolved batch
    fits: np.ndarray  # bool
    description: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(a.values) for a in self.axes)

    @property
    def columns(self) -> list[str]:
        return [a.column for a in self.axes] + list(METRICS) + ["batch", "fits"]

    def __len__(self) -> int:
        return int(np.prod(self.shape)) if self.axes else 1

    def rows(self):
        for idx in itertools.product(*[range(n) for n in self.shape]):
            row = {a.column: a.values[i] for a, i in zip(self.axes, idx)}
            for m in METRICS:
                v = float(self.metrics[m][idx])
                row[m] = v if np.isfinite(v) else None
            row["batch"] = int(self.batch[idx])
            row["fits"] = bool(self.fits[idx])
            yield row


def run_sweep(hw, model, sc, prof, axes: list[Axis], *, description: str = "") -> SweepResult:
    """Evaluate the grid spanned by ``axes`` (see module doc). ``sc``: the scenario as asked
    (:attr:`perfmodel.resolve.Setup.asked`): each grid point's is resolved for the part, the engine's preset
    following the point's layout."""
    from .. import capacity
    from ..projection import serving_times
    from ..spec import spec_with

    names = [a.field for a in axes]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise InputError(f"{', '.join(dup)} varied twice", field="--vary")
    check_grid(axes)
    shape = tuple(len(a.values) for a in axes)
    out = {m: np.full(shape, np.nan) for m in METRICS}
    batch_out = np.zeros(shape, dtype=int)
    fits_out = np.zeros(shape, dtype=bool)
    vec = [i for i, a in enumerate(axes) if a.vectorised]
    loop = [i for i, a in enumerate(axes) if not a.vectorised]
    for combo in itertools.product(*[range(shape[i]) for i in loop]):
        sc2 = sc
        hw2 = hw
        kw = {}
        for i, j in zip(loop, combo):
            a = axes[i]
            if a.field in LOOPED_SPEC:
                hw2 = spec_with(hw2, **{a.field: a.values[j]})
            else:
                kw[a.field] = a.values[j]
        sc2 = _checked_point(model, sc, hw2, kw, {axes[i].field: axes[i].values[j] for i, j in zip(loop, combo)})
        sc2 = resolve_scenario(sc2, hw2, model)  # the point's layout and engine, resolved as a command resolves its own
        grids = np.meshgrid(*[np.arange(shape[i]) for i in vec], indexing="ij") if vec else []
        overrides = {}
        batch_idx = None
        for i, g in zip(vec, grids):
            a = axes[i]
            if a.field == "batch":
                batch_idx = g
            else:
                overrides[a.field] = np.asarray(a.values, dtype=float)[g]
        hwa = spec_with(hw2, **overrides) if overrides else hw2
        cap = capacity.max_batch(model, sc2, hwa)
        sub_shape = tuple(shape[i] for i in vec)
        cap = np.broadcast_to(np.asarray(cap), sub_shape)
        if batch_idx is None:
            want = np.full(sub_shape, -1 if sc2.batch == "max" else int(sc2.batch))
        else:
            vals = [(-1 if v == "max" else int(v)) for v in axes[[a.field for a in axes].index("batch")].values]
            want = np.asarray(vals)[batch_idx]
        # 'max': what memory holds, and no more than the engine's scheduler runs at once (as project_resolved)
        sched = sc2.max_batch
        largest = np.minimum(cap, sched) if sched else cap
        batch = np.where(want < 0, largest, want).astype(int)
        fits = (batch >= 1) & (batch <= cap)
        b_eval = np.maximum(batch, 1)
        st = serving_times(model, hwa, sc2 if sc2.batch != "max" else sc2.with_(batch=1), prof,
                           b_eval if b_eval.ndim else int(b_eval))
        vals = {"ttft_ms": st.ttft_s * 1e3, "tpot_ms": st.tpot_s * 1e3, "e2e_ms": st.e2e_s * 1e3,
                "throughput_tok_s": st.throughput_tok_s, "throughput_tok_s_per_gpu": st.throughput_tok_s / sc2.gpus}
        index = [slice(None)] * len(axes)
        for i, j in zip(loop, combo):
            index[i] = j
        index = tuple(index)
        for m, v in vals.items():
            v = np.broadcast_to(np.asarray(v, dtype=float), sub_shape)
            bad = (batch >= 1) & ~(np.isfinite(v) & (v >= 0))
            if bad.any():
                raise InputError(f"{m} is not finite or negative at {_point(axes, loop, combo, vec, bad)}: a swept "
                                 "figure is out of any physical range", field="--vary")
            out[m][index] = np.where(batch >= 1, v, np.nan)
        batch_out[index] = batch
        fits_out[index] = fits
    if not description:
        description = (f"{model.name} on {hw.name}; " + "; ".join(f"{a.field} = {_show(a)}" for a in axes)
                       + f"; tp {sc.tp}, {sc.dtype}, isl {sc.isl}, osl {sc.osl}, {sc.batching} batching")
    return SweepResult(axes, out, batch_out, fits_out, description)


def _checked_point(model, sc, hw, kw: dict, where: dict):
    """The scenario at one grid point, put through the checks a single projection runs (:meth:`Scenario.validated`,
    :func:`perfmodel.graph.check_layout`: head and layer divisibility, experts, the model's context). A point no
    engine runs stops the sweep with one line naming it; a point that runs but does not fit in memory is kept and
    marked ``fits=False``."""
    from ..graph import check_layout

    try:
        sc2 = sc.with_(**kw).validated() if kw else sc
        check_layout(model, resolve_scenario(sc2, hw, model))
    except InputError as e:
        if not where:
            raise
        at = ", ".join(f"{k}={v}" for k, v in where.items())
        raise InputError(f"{e.detail} (at grid point {at})", file=e.file, field="--vary") from None
    return sc2


def _point(axes, loop, combo, vec, bad) -> str:
    """The first grid point where ``bad`` holds, as FIELD=VALUE, ..."""
    first = np.argwhere(np.atleast_1d(bad))[0] if np.ndim(bad) else ()
    parts = [f"{axes[i].field}={axes[i].values[j]}" for i, j in zip(loop, combo)]
    parts += [f"{axes[i].field}={axes[i].values[int(j)]}" for i, j in zip(vec, first)]
    return ", ".join(parts) or "the base scenario"


def combine(results: list[tuple[str, SweepResult]]) -> SweepResult:
    """Sweeps of the same grid on several parts as one result with a leading ``arch`` axis (a column in CSV
    and xlsx, a line per part in the chart)."""
    first = results[0][1]
    axes = [Axis("arch", [k for k, _ in results], "arch")] + list(first.axes)
    metrics = {m: np.stack([r.metrics[m] for _, r in results]) for m in METRICS}
    return SweepResult(axes, metrics, np.stack([r.batch for _, r in results]), np.stack([r.fits for _, r in results]),
                       " | ".join(r.description for _, r in results))


def _show(a: Axis) -> str:
    vals = a.values
    if len(vals) > 6:
        return f"{_fmt(vals[0])} .. {_fmt(vals[-1])} ({len(vals)} values)"
    return ", ".join(_fmt(v) for v in vals)


def _fmt(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def default_batch_sweep(hw, model, sc, prof) -> SweepResult:
    """Batch 1, 2, 4, ... up to the largest that fits (and that largest)."""
    from .. import capacity

    cap = int(capacity.max_batch(model, sc.with_(batch=1) if sc.batch == "max" else sc, hw))
    vals: list = []
    b = 1
    while b <= max(cap, 1):
        vals.append(b)
        b *= 2
    if cap >= 1 and cap not in vals:
        vals.append(cap)
    return run_sweep(hw, model, sc, prof, [Axis("batch", vals, "batch")])


# ---------------------------------------------------------------------------------------------------
# Writers
# ---------------------------------------------------------------------------------------------------


def sweep_csv(res: SweepResult) -> str:
    from ..io import csv_text

    return csv_text(res.columns, ([row[c] for c in res.columns] for row in res.rows()))


def sweep_xlsx(res: SweepResult) -> bytes:
    import io

    from .common import require_openpyxl

    require_openpyxl()
    from openpyxl import Workbook
    from openpyxl.styles import Font

    from .common import set_text

    wb = Workbook()
    ws = wb.active
    ws.title = "Sweep"
    set_text(ws, "A1", "Sweep: values computed by perfmodel (vectorised model; not live formulas)")
    ws["A1"].font = Font(bold=True)
    set_text(ws, "A2", res.description)
    for i, c in enumerate(res.columns, start=1):
        ws.cell(row=4, column=i, value=c).font = Font(bold=True)
    for r, row in enumerate(res.rows(), start=5):
        for i, c in enumerate(res.columns, start=1):
            v = row[c]
            if isinstance(v, str):
                from openpyxl.utils import get_column_letter

                set_text(ws, f"{get_column_letter(i)}{r}", v)
            else:
                ws.cell(row=r, column=i, value=v)
    buf = io.BytesIO()
    wb.save(buf)
    return buf.getvalue()


PLOT_LINES = 12
PLOT_POINTS = 400


def _evenly(n: int, most: int) -> list[int]:
    """At most ``most`` indices of ``range(n)``, evenly spread, the first and the last among them."""
    if n <= most:
        return list(range(n))
    return sorted({round(k * (n - 1) / (most - 1)) for k in range(most)})


def sweep_svg(res: SweepResult, metric: str = "throughput_tok_s_per_gpu", title: str | None = None) -> str:
    """The metric against the first varied field, one line per part (several --arch) or per value of the
    second field (others at their first value)."""
    from .charts import Series, line_chart

    if metric not in METRICS:
        raise InputError(f"expected one of {', '.join(METRICS)}, got {metric!r}", field="--metric")
    if not res.axes:
        raise InputError("nothing varied: give at least one --vary", field="--vary")
    data = res.metrics[metric]
    axes = res.axes
    # x: the first varied field; a line per part (with several) or per value of the next field
    xi = next((i for i, a in enumerate(axes) if a.field != "arch"), 0)
    si = next((i for i, a in enumerate(axes) if a.field == "arch"), None)
    if si is None:
        si = next((i for i in range(len(axes)) if i != xi), None)
    a0 = axes[xi]
    xs_raw = a0.values
    numeric = all(isinstance(v, (int, float)) for v in xs_raw)
    xs = [float(v) for v in xs_raw] if numeric else list(range(len(xs_raw)))

    def at(i: int, j: int | None):
        idx = [0] * len(axes)
        idx[xi] = i
        if si is not None and j is not None:
            idx[si] = j
        return data[tuple(idx)]

    # a chart a person reads: at most PLOT_LINES lines (evenly picked values of the second field, the first and
    # last among them) of at most PLOT_POINTS points each (a 1000 x 1000 sweep had drawn a 137 MB SVG); the CSV
    # keeps every point
    points = _evenly(len(xs), PLOT_POINTS)
    xs_plot = [xs[i] for i in points]
    series = []
    if si is not None:
        a1 = axes[si]
        for j in _evenly(len(a1.values), PLOT_LINES if a1.field != "arch" else len(a1.values)):
            v = a1.values[j]
            name = str(v) if a1.field == "arch" else f"{a1.field} = {_label_value(a1.field, v)}"
            series.append(Series(name, xs_plot, [at(i, j) for i in points]))
    else:
        series.append(Series(metric, xs_plot, [at(i, None) for i in points]))
    pos = [x for x in xs if x > 0]
    logx = numeric and len(pos) == len(xs) and max(pos) / min(pos) >= 20
    fixed = "; ".join(f"{a.field} = {_label_value(a.field, a.values[0])}" for k, a in enumerate(axes)
                      if k not in (xi, si))
    return line_chart(series, title=title or f"{metric} vs {a0.field}" + (f" ({fixed})" if fixed else ""),
                      xlabel=_axis_label(a0.field), ylabel=metric, logx=logx,
                      xticks=None if numeric else [(i, str(v)) for i, v in enumerate(xs_raw)],
                      x_format=_formatter(a0.field))


def _label_value(name, v) -> str:
    from ..units import format_si

    if isinstance(v, float) and name in _SPEC:
        from .common import field_unit

        return format_si(v, field_unit(_SPEC[name]))
    return str(v)


def _axis_label(name: str) -> str:
    from .common import field_unit

    if name in _SPEC:
        u = field_unit(_SPEC[name])
        return f"{_SPEC[name].label}" + (f" ({u})" if u else "")
    return name


def _formatter(name: str):
    from ..units import format_si
    from .common import field_unit

    if name in _SPEC and field_unit(_SPEC[name]):
        u = field_unit(_SPEC[name])
        return lambda v: format_si(v, u, 3)
    return None
