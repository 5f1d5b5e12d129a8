"""Measured serving benchmarks from NVIDIA's aiconfigurator-core, as rows of this project's validation table.

``aiconfigurator-core`` 0.12.0 (PyPI, Apache-2.0, NVIDIA) ships ``aiconfigurator_core/systems/silicon_sample.csv``:
end-to-end serving results measured on H100, H200, B200, B300, GB200 and GB300 with TensorRT-LLM, vLLM and
SGLang, one row per (model, system, engine and version, precision, layout, isl, osl, client concurrency), with
the mean TTFT and mean TPOT the benchmark client reported. This module turns each row into two rows of
``workloads/validation/aiconfigurator_silicon.csv`` in the layout of ``public_validation.csv`` (metric ``ttft``
and metric ``tpot``, both in ms), plus the columns ``perfmodel validate`` needs to run the request-level serving
simulator under closed-loop concurrency (:mod:`perfmodel.validate`).

What each output column is:

- ``model``: this project's descriptor where the architecture is identical (Llama 3.1 8B and 70B, their
  Instruct and NVIDIA FP8 checkpoints; DeepSeek-R1 / V3 / V3.1 and their NVFP4 checkpoints share the
  DeepSeek-V3 architecture, said in ``notes``), else the Hugging Face id, kept so that coverage is visible.
- ``hardware``: this project's spec key for the aiconfigurator system name.
- ``tp``, ``pp``, ``batch``: the aggregated worker's attention TP and PP degrees and ``batch_size`` as the file
  records it (per worker or per attention-DP rank); empty for disaggregated rows, whose prefill and decode
  layouts go into ``notes``.
- ``concurrency``: the benchmark client's concurrency, read from ``silicon_concurrency=`` in the row's
  ``silicon_data_source`` (it differs from ``batch_size`` where the file records a per-rank batch); empty
  where the file does not record it.
- ``precision``: the file's; a row with neither precision nor quantization mode recorded (the unquantized
  checkpoints of Llama-3.1-8B-Instruct and Qwen3-32B) is taken as bf16, said in ``notes``.
- ``attention_dp``, ``moe_tp``, ``moe_ep``, ``mode`` (agg | disagg), ``engine``, ``engine_version``,
  ``hf_model``: as the file has them (``hf_model`` only where ``model`` is a descriptor), but for a nightly build
  the file names without its date (``nightly-dev``) whose container image tag dates it
  (``image=lmsysorg/sglang:nightly-dev-cu13-20260317-1eea7448``): ``engine_version`` is then that tag, which
  :func:`perfmodel.engines.nightly_release` reads (the release a nightly stands nearest).
- ``notes``: what the conversion assumed or read besides the columns, among them ``run name: tp N ep M`` where the
  row's ``id`` states the layout it ran (``..._c32_tp8_0_ep8_0_973``): 234 lines record N x N GPUs for such a run
  of N, 109 measurements with no other copy (:func:`perfmodel.validate`'s squared-layout check reads the two
  against each other); ``line L records ...`` where another line records the same run otherwise.
- ``value``: the measured mean, to 6 significant digits.
- ``source``: package, version, file and line (the same line for a measurement's two rows; ``(also line L)``
  where the file records the run again), then, on the ``ttft`` row, the line's ``silicon_data_source`` with
  local paths cut to their file name (no ``/Users/...``); once per measurement rather than twice keeps the
  table small.

**One run, one pair of rows.** The file records 1,110 of its runs on more than one line (1,318 lines more: the
same mean TTFT and TPOT to 12 significant digits, under the same model, part, engine and lengths, from two or three of its
sources, now and then under another layout, checkpoint name or release string). Such copies are one measurement
and count once; :meth:`_Copy.trust` says which is kept.

Nothing here is fitted to anything: the rows are for validation only. Output is deterministic (input order),
written atomically, every cell through :func:`perfmodel.io.csv_safe`.
"""
from __future__ import annotations

import csv
import io
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..errors import InputError

PACKAGE = "aiconfigurator-core"
VERSION = "0.12.0"
FILE = "systems/silicon_sample.csv"

# aiconfigurator system name -> this project's hardware spec key (perfmodel list hardware)
SYSTEMS: dict[str, str] = {"h100_sxm": "h100-sxm", "h200_sxm": "h200-sxm", "b200_sxm": "b200", "b300_sxm": "b300",
                           "gb200": "gb200", "gb300": "gb300"}

# Hugging Face id -> (descriptor, note); only where the architecture is the descriptor's exactly
MODELS: dict[str, tuple[str, str]] = {
    "meta-llama/Llama-3.1-70B": ("llama-3.1-70b", ""),
    "meta-llama/Llama-3.1-70B-Instruct": ("llama-3.1-70b", ""),
    "meta-llama/Llama-3.1-8B": ("llama-3.1-8b", ""),
    "meta-llama/Llama-3.1-8B-Instruct": ("llama-3.1-8b", ""),
    "nvidia/Llama-3.1-8B-Instruct-FP8": ("llama-3.1-8b", "NVIDIA FP8 checkpoint"),
    "deepseek-ai/DeepSeek-V3": ("deepseek-v3", ""),
    "deepseek-ai/DeepSeek-R1": ("deepseek-v3", "DeepSeek-V3 architecture"),
    "nvidia/DeepSeek-R1-NVFP4": ("deepseek-v3", "DeepSeek-V3 architecture"),
    "nvidia/DeepSeek-V3.1-NVFP4": ("deepseek-v3", "DeepSeek-V3 architecture"),
}

NEEDED = ("id", "silicon_data_source", "backend", "backend_version", "model_path", "system", "precision", "mode",
          "isl", "osl", "gemm_quant_mode", "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size",
          "moe_ep_size", "silicon_ttft_ms", "silicon_tpot_ms")
LAYOUT = ("batch_size", "num_workers", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")

COLUMNS = ("id", "kind", "model", "hardware", "gpus", "tp", "pp", "precision", "isl", "osl", "batch", "metric",
           "value", "unit", "source", "notes", "engine", "engine_version", "concurrency", "attention_dp", "moe_tp",
           "moe_ep", "mode", "hf_model")

# the layout a run's own name states (``..._agg_1024x1024_c32_tp8_0_ep8_0_973``): the GPUs it ran on and their
# expert-parallel width; kept as a note, the evidence :func:`perfmodel.validate` reads a recorded layout against
_RUN_LAYOUT = re.compile(r"_tp(\d+)(?:_\d+)?_ep(\d+|none)(?:_\d+)?_\d+$")
_CONCURRENCY = re.compile(r"(?:^|;)\s*silicon_concurrency=(\d+)\s*(?:;|$)")
# a container image whose tag names a dated nightly build: lmsysorg/sglang:nightly-dev-cu13-20260317-1eea7448
_NIGHTLY_IMAGE = re.compile(r"(?:^|;)\s*image=[^;:\s]+:(nightly[\w.-]*?-20\d{6}(?:-[\w.]+)?)\s*(?:;|$)")
_LOCAL_PATH = re.compile(r"(?<![\w.:-])(?:~|[A-Za-z]:)?[/\\](?:[^;\s/\\]+[/\\])+([^;\s/\\]+)")


def sanitize_source(text: str) -> str:
    """The row's ``silicon_data_source`` with every local absolute path cut to its file name (a container
    image such as ``nvcr.io/nvidia/...:1.2`` is not a local path and stays)."""
    return _LOCAL_PATH.sub(lambda m: m.group(1), text.strip())


def _int(row: dict, col: str, where: str, *, blank: int | None = None) -> int | None:
    text = (row.get(col) or "").strip()
    if not text:
        return blank
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v != int(v) or v < 0:
        raise InputError(f"expected a non-negative integer, got {text!r}", file=where, field=col)
    return int(v)


def _value(row: dict, col: str, where: str) -> float:
    text = (row.get(col) or "").strip()
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"expected a positive finite time in ms, got {text!r}", file=where, field=col)
    return v


def _layout(row: dict, prefix: str, where: str) -> tuple[str, int | None]:
    """A disaggregated side as compact text, e.g. ``P 1x(tp1 pp1 adp4 moetp1 ep4 b1)`` (workers x (tp, pp,
    attention DP, MoE TP, MoE EP, batch); ``?`` where not recorded), and its GPUs (workers x tp x pp x
    attention DP) where recorded."""
    v = {k: _int(row, prefix + k, where) for k in LAYOUT}
    workers = "?" if v["num_workers"] is None else v["num_workers"]
    text = f"{prefix[0].upper()} {workers}x({_layout_text(*(v[k] for k in LAYOUT if k != 'num_workers'))})"
    if None in (v["num_workers"], v["tp_size"], v["pp_size"]):
        return text, None
    return text, v["num_workers"] * v["tp_size"] * v["pp_size"] * max(v["attention_dp_size"] or 1, 1)


def _layout_text(batch, tp, pp, adp, moe_tp, mep) -> str:
    """A layout as compact text (``tp8 pp1 adp1 moetp8 ep8 b32``; ``?`` where not recorded), in :data:`LAYOUT` order."""
    q = ["?" if v is None else v for v in (tp, pp, adp, moe_tp, mep, batch)]
    return "tp{} pp{} adp{} moetp{} ep{} b{}".format(*q)


_SIDE = re.compile(r"([PD]) (\d+|\?)x\(tp(\d+|\?) pp(\d+|\?) adp(\d+|\?) moetp(\d+|\?) ep(\d+|\?) b(\d+|\?)\)")
SIDE_FIELDS = ("workers", "tp", "pp", "attention_dp", "moe_tp", "moe_ep", "batch")


def disagg_layouts(notes: str) -> dict[str, dict[str, int | None]] | None:
    """The prefill ("P") and decode ("D") sides :func:`_layout` wrote into a row's ``notes``, each as
    {workers, tp, pp, attention_dp, moe_tp, moe_ep, batch} (None where not recorded); None if absent."""
    own = re.search(r"(?:^|; )disagg ([^;]*)", notes or "")  # the row's own; "line L records P ..." is a copy's
    sides = {m.group(1): {k: None if v == "?" else int(v) for k, v in zip(SIDE_FIELDS, m.groups()[1:])}
             for m in _SIDE.finditer(own.group(1) if own else "")}
    return sides if set(sides) == {"P", "D"} else None


def _cell(v: int | None):
    return "" if v is None else v


@dataclass
class _Copy:
    """One line of the file, converted: the measurement it records and the columns it records it under."""
    line: int
    cells: dict  # COLUMNS but id, metric, value and source
    ttft: float
    tpot: float
    data_source: str
    layout: str  # the layout as recorded, compact (:func:`_layout_text`, or the disaggregated sides)
    agreement: int  # +1: an aggregated run's name states the GPUs it records; -1: it states others; 0: no name

    @property
    def measurement(self) -> tuple:
        """What identifies the run: the same mean TTFT and TPOT to 12 significant digits, under the same model,
        part, engine and lengths, are one run recorded twice, never two runs. (Not to the last digit: the file
        writes a value now with 17 digits, now as the shortest text of a neighbouring double, 380.78511187377444
        and 380.7851118737744.)"""
        c = self.cells
        return c["model"], c["hardware"], c["engine"], c["isl"], c["osl"], f"{self.ttft:.12g}", f"{self.tpot:.12g}"

    def trust(self) -> tuple:
        """Which of a measurement's copies to keep: one whose run name states the GPUs it records, then one
        that records a disaggregated run's worker counts, then the first in the file."""
        return self.agreement, self.cells["gpus"] != "", -self.line


def _engine_version(row: dict) -> str:
    """The file's ``backend_version``; for a nightly it names without a date, its image's dated tag where the data
    source records one (module doc)."""
    from ..engines import nightly_date

    version = (row.get("backend_version") or "").strip()
    if version.startswith("nightly") and nightly_date(version) is None:
        m = _NIGHTLY_IMAGE.search(row.get("silicon_data_source") or "")
        if m:
            return m.group(1)
    return version


def _copy(line: int, row: dict, where: str) -> _Copy:
    """One input line as a :class:`_Copy`; a clear error for a malformed cell."""
    at = f"{where}:{line}"
    system = (row.get("system") or "").strip()
    hf = (row.get("model_path") or "").strip()
    mode = (row.get("mode") or "").strip().lower()
    if not system or not hf or mode not in ("agg", "disagg"):
        field = "system" if not system else ("model_path" if not hf else "mode")
        raise InputError(f"expected a value{' of agg or disagg' if field == 'mode' else ''}, got "
                         f"{row.get(field)!r}", file=at, field=field)
    model, note = MODELS.get(hf, (hf, ""))
    notes = [note] if note else []
    precision = (row.get("precision") or "").strip().lower()
    if not precision:
        if (row.get("gemm_quant_mode") or "").strip():
            raise InputError("precision is empty but a quantization mode is given", file=at, field="precision")
        precision = "bf16"
        notes.append("precision blank, no quant mode: bf16")
    m = _CONCURRENCY.search(row.get("silicon_data_source") or "")
    concurrency = int(m.group(1)) if m else None
    isl, osl = _int(row, "isl", at), _int(row, "osl", at)
    if not isl or not osl:
        raise InputError("expected positive isl and osl", file=at, field="isl" if not isl else "osl")
    ttft, tpot = _value(row, "silicon_ttft_ms", at), _value(row, "silicon_tpot_ms", at)
    adp, moe_tp, mep = (_int(row, c, at) for c in ("attention_dp_size", "moe_tp_size", "moe_ep_size"))
    named = _RUN_LAYOUT.search((row.get("id") or "").strip())
    if mode == "agg":
        tp, pp, batch = _int(row, "tp_size", at), _int(row, "pp_size", at), _int(row, "batch_size", at)
        gpus = tp * pp * max(adp or 1, 1) if tp and pp else None
        layout = _layout_text(batch, tp, pp, adp, moe_tp, mep)
        agreement = 0 if not named or gpus is None else 1 if gpus == int(named.group(1)) else -1
    else:
        tp = pp = batch = None
        sides = [_layout(row, p, at) for p in ("prefill_", "decode_")]
        layout = " ".join(t for t, _ in sides)
        notes.append("disagg " + layout)
        gpus = sides[0][1] + sides[1][1] if None not in (sides[0][1], sides[1][1]) else None
        adp = moe_tp = mep = None
        agreement = 0  # a disaggregated run's name gives one side's width, not its GPUs
    if concurrency is None:
        notes.append("concurrency not recorded")
    if named:
        notes.append(f"run name: tp {named.group(1)} ep {named.group(2)}")
    cells = dict(kind="inference", model=model, hardware=SYSTEMS.get(system, system), gpus=_cell(gpus), tp=_cell(tp),
                 pp=_cell(pp), precision=precision, isl=isl, osl=osl, batch=_cell(batch), unit="ms",
                 notes=notes, engine=(row.get("backend") or "").strip(),
                 engine_version=_engine_version(row), concurrency=_cell(concurrency),
                 attention_dp=_cell(adp), moe_tp=_cell(moe_tp), moe_ep=_cell(mep), mode=mode,
                 hf_model=hf if hf != model else "")
    return _Copy(line, cells, ttft, tpot, sanitize_source(row.get("silicon_data_source") or ""), layout, agreement)


def convert_rows(rows: Iterable[dict], *, src_name: str = FILE, where: str = FILE) -> list[list]:
    """Output rows (:data:`COLUMNS` order), two per measurement, in input order.

    A measurement the file records on several lines (the same run from two of its sources, now and then under
    different layouts or names) becomes one pair of rows, from the copy :meth:`_Copy.trust` prefers; its
    ``source`` names the other lines and its ``notes`` any layout or release they record otherwise."""
    copies = [_copy(line, row, where) for line, row in enumerate(rows, start=2)]
    runs: dict[tuple, list[_Copy]] = {}
    for c in copies:
        runs.setdefault(c.measurement, []).append(c)
    out: list[list] = []
    for c in copies:
        same = runs[c.measurement]
        if c is not max(same, key=_Copy.trust):
            continue
        others = [o for o in same if o is not c]
        notes = list(c.cells["notes"])
        notes += [f"line {o.line} records {o.layout}" for o in others if o.layout != c.layout]
        notes += [f"line {o.line} records release {o.cells['engine_version'] or '(none)'}" for o in others
                  if o.cells["engine_version"] != c.cells["engine_version"]]
        notes += [f"line {o.line} names {o.cells['hf_model'] or o.cells['model']}" for o in others
                  if o.cells["hf_model"] != c.cells["hf_model"]]
        origin = f"{PACKAGE} {VERSION} {src_name}:{c.line}"
        if others:
            origin += " (also line{} {})".format("s" if len(others) > 1 else "", ", ".join(str(o.line) for o in others))
        for metric, value in (("ttft", c.ttft), ("tpot", c.tpot)):
            # the data source once per measurement (on its ttft row), to keep the table small
            cells = dict(c.cells, id=f"aic-{c.line}-{metric}", metric=metric, value=float(f"{value:.6g}"),
                         source=f"{origin}; {c.data_source}" if metric == "ttft" else origin, notes="; ".join(notes))
            out.append([cells[k] for k in COLUMNS])
    return out


def convert_text(text: str, *, src_name: str = FILE, where: str = FILE) -> str:
    """The validation table (CSV text) for the text of ``silicon_sample.csv``."""
    from ..io import csv_text

    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in NEEDED if c not in (reader.fieldnames or ())]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; expected aiconfigurator's silicon_sample.csv",
                         file=where)
    return csv_text(COLUMNS, convert_rows(reader, src_name=src_name, where=where))


def convert_file(src, out) -> int:
    """Convert ``src`` (silicon_sample.csv) into ``out``; the number of rows written."""
    from ..io import read_input_text, write_text_atomic

    p = Path(src)
    text = read_input_text(p, what="aiconfigurator's silicon_sample.csv", max_bytes=64 * 2**20)
    # the source names the file as the package ships it, never the local path it was read from
    name = FILE if p.name == Path(FILE).name else p.name
    table = convert_text(text, src_name=name, where=str(p))
    write_text_atomic(out, table)
    return table.count("\n") - 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0].startswith("-"):
        print("usage: python -m perfmodel.imports.aic_silicon SRC.csv OUT.csv", file=sys.stderr)
        return 2
    try:
        n = convert_file(args[0], args[1])
    except InputError as e:
        print(f"perfmodel: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args[1]} ({n} rows)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
