"""Predicted against published results (``perfmodel validate``).

Reads a table like ``shared/reference/public_validation.csv``: one published measurement a row, with the
hardware, model, parallel layout, precision, sequence lengths, batch and metric. Inference rows are
projected with the scenario the row describes; training rows by :mod:`perfmodel.train`.

**Serving-benchmark rows** (a table with a ``concurrency`` column, metric ``ttft`` or ``tpot``; e.g.
``workloads/validation/aiconfigurator_silicon.csv`` from :mod:`perfmodel.imports.aic_silicon`) are measured
means of a benchmark client holding ``concurrency`` requests in flight. They are projected with the
request-level serving simulator (:mod:`perfmodel.serve`) under closed-loop concurrency at the row's engine,
tp, pp, precision, isl and osl, the engine preset's limits and its way of admitting requests
(:func:`admission_cap`), and compared on the steady-state mean TTFT and mean TPOT (docs/serving.md;
docs/validation-silicon.md). Nothing is ever fitted to these rows. A row the simulator cannot express gets
a status instead of a number (disaggregated, a MoE layout that does not cover the GPUs, int4, no model descriptor,
concurrency not recorded, a per-worker batch that differs from the client's concurrency, or a projection
that refuses), never an error.
The two metrics of one measurement share one simulation; step-time tables are shared by every row with the
same scenario, isl and osl (:func:`perfmodel.serve.simulate.build_instance`).
"""
from __future__ import annotations

import math
import re
import statistics
from pathlib import Path

from .errors import InputError
from .imports.aic_silicon import disagg_layouts
from .io import csv_dict_rows, read_input_text

REQUIRED = ("id", "kind", "model", "hardware", "tp", "pp", "precision", "isl", "osl", "batch", "metric", "value")
METRICS = {"output_throughput_per_gpu": "throughput_tok_s_per_gpu", "ttft": "ttft_ms", "tpot": "tpot_ms",
           "output_throughput": "throughput_tok_s"}
SERVING_METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms"}
LAYOUT_ISSUE = "a MoE layout the scenario cannot express"


def default_csv() -> Path:
    """The published-results table shipped in the repository (a copy of the shared reference table)."""
    from .paths import workloads_dir

    cand = workloads_dir() / "validation" / "public_validation.csv"
    if cand.is_file():
        return cand
    raise InputError("no validation table found; pass --csv PATH", field="--csv")


def _float(row, col, where):
    try:
        v = float(row[col])
    except (TypeError, ValueError):
        raise InputError(f"expected a number, got {row.get(col)!r}", file=where, field=col) from None
    if not math.isfinite(v) or v <= 0:
        raise InputError(f"expected a positive finite published value, got {row.get(col)!r}", file=where, field=col)
    return v


def engine_of(row: dict, engine: str) -> str:
    """The engine a row was measured with: ``engine`` unless it is ``auto``, else read off the row's source."""
    if engine != "auto":
        return engine
    from .engines import ENGINES

    named = (row.get("engine") or "").strip().lower()
    if named in ENGINES:  # the table's own engine column, where it has one
        return named
    from .engines import engine_named_in

    return engine_named_in(f"{row.get('source', '')} {row.get('notes', '')}") or "auto"


def _int(row, col, where):
    try:
        return int(float(row[col]))
    except (TypeError, ValueError):
        raise InputError(f"expected an integer, got {row.get(col)!r}", file=where, field=col) from None


def row_format(row: dict, model) -> str:
    """The scenario's format for a row's ``precision``. A precision that names the checkpoint's own expert format
    (gpt-oss published as "fp4": MXFP4 experts, bf16 everywhere else) describes that checkpoint as published: the
    rest of the model runs in bf16 and the experts keep their format (:func:`perfmodel.geometry.expert_format`)."""
    precision = row["precision"].strip().lower()
    own = getattr(model, "expert_dtype", "") or ""
    return "bf16" if own and precision == own else precision


def _scenario_for(row: dict, where: str, engine: str, model, release: str | None = None):
    from .scenario import Scenario

    precision = row_format(row, model)
    osl = _int(row, "osl", where)
    static = "static" in (row.get("notes") or "").lower() or row["metric"] == "ttft"
    cache = re.search(r"cache_implementation=(dynamic|static)", row.get("notes") or "")
    # transformers' compiled static cache: decode replayed from CUDA graphs, prefill eager; a static cache row
    # that does not say torch.compile ran eager (generate(disable_compile=True))
    compiled = cache is not None and "torch.compile" in (row.get("notes") or "")
    launch = "auto" if compiled else ("eager" if cache is not None and cache.group(1) == "static" else None)
    return Scenario(isl=_int(row, "isl", where), osl=max(1, osl), batch=_int(row, "batch", where),
                    tp=_int(row, "tp", where), pp=_int(row, "pp", where), dtype=precision,
                    batching="static" if static else "continuous", engine=engine_of(row, engine),
                    kv_cache=cache.group(1) if cache else None, launch=launch,
                    engine_release=release).validated()


def table_release(row: dict, release_tables: bool | None, own_profile) -> tuple[str | None, frozenset[str] | None]:
    """(release, its table families) whose tables price ``row`` (:func:`run_validation`'s ``release_tables``): the
    release it records in every family, where asked for, or by default in the families where that release's tables
    time the kernels the engine folder's own do (``own_profile()``: the row's profile without a release's tables);
    (None, None) where none stands."""
    from .releases import kernel_matched_families

    release = row_release(row, release_tables is not False)
    if release is None or release_tables:
        return release, None
    families = kernel_matched_families(own_profile(), release)
    return (release, families) if families else (None, None)


def row_release(row: dict, wanted: bool = True) -> str | None:
    """The engine release a row records (its ``engine_version``), for the tables of that release
    (:mod:`perfmodel.releases`) where ``wanted``; a dated nightly build the release it stands nearest
    (:func:`perfmodel.engines.nightly_release`); None where it records none or no numbered release (``nightly-dev``
    with no date: the engine folder's own tables)."""
    if not wanted:
        return None
    from .engines import numbered_release

    return numbered_release((row.get("engine") or "").strip().lower(), row.get("engine_version"))


def parse_where(text: str | None) -> list[tuple[str, frozenset]]:
    """``--where hardware=b200|gb200,engine=trtllm`` -> [(column, allowed values)] (case-insensitive)."""
    if text is None or not str(text).strip():
        return []
    out = []
    for clause in str(text).split(","):
        col, eq, values = clause.partition("=")
        allowed = frozenset(v.strip().lower() for v in values.split("|") if v.strip())
        if not eq or not col.strip() or not allowed:
            raise InputError(f"expected COLUMN=VALUE[|VALUE...][,COLUMN=VALUE...], got {clause.strip()!r}",
                             field="--where")
        out.append((col.strip(), allowed))
    return out


def _select(rows: list[dict], where, limit: int | None, path) -> list[tuple[int, dict]]:
    """(line, row) of the rows ``where`` keeps, the first ``limit`` of them."""
    clauses = parse_where(where) if isinstance(where, (str, type(None))) else list(where)
    if clauses and rows:
        unknown = [c for c, _ in clauses if c not in rows[0]]
        if unknown:
            raise InputError(f"no column {', '.join(unknown)} in the table; columns: {', '.join(rows[0])}",
                             file=str(path), field="--where")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InputError(f"expected a positive number of rows, got {limit!r}", field="--limit")
    out = []
    for i, row in enumerate(rows, start=2):
        if all((row.get(c) or "").strip().lower() in allowed for c, allowed in clauses):
            out.append((i, row))
            if limit is not None and len(out) >= limit:
                break
    return out


def run_validation(path=None, *, calibration=None, mode: str = "latency", engine: str = "auto", where=None,
                   limit: int | None = None, release_tables: bool | None = None, schedule: str | None = None,
                   closed_loop_start: str = "burst") -> list[dict]:
    """Project every row of the table; ``engine`` overrides the engine read off each row's source.
    ``where`` (``hardware=b200,engine=trtllm``, or parsed clauses) and ``limit`` keep a subset of the rows;
    ``release_tables``: price each row's MoE layers and collectives with the tables of the engine release it
    records, where such tables were imported (:mod:`perfmodel.releases`): None (the default) where they time the
    same kernels as the engine folder's own, family by family (:func:`perfmodel.releases.kernel_matched_families`),
    True wherever they exist, False never (docs/engines.md says why); ``schedule``: the
    serving simulation's schedule for every aggregated row (docs/serving.md, Schedules; None: each engine's preset);
    ``closed_loop_start``: how each closed loop's first wave starts (:data:`perfmodel.scenario.CLOSED_LOOP_STARTS`)."""
    from .projection import project_resolved
    from .releases import collective_families
    from .resolve import resolve_hardware, resolve_model, resolve_scenario, setup

    p = Path(path) if path else default_csv()
    text = read_input_text(p, what="a validation table (CSV)", max_bytes=8 * 2**20)
    rows = csv_dict_rows(text, file=str(p))
    if rows:
        missing = [c for c in REQUIRED if c not in rows[0]]
        if missing:
            raise InputError(f"missing column(s) {', '.join(missing)}", file=str(p))
    out = []
    serving = (_Serving(calibration, mode, engine, release_tables, schedule, closed_loop_start)
               if rows and "concurrency" in rows[0] else None)
    selected = _select(rows, where, limit, p)
    for i, row in selected:
        where = f"{p}:{i}"
        rec = {"id": row["id"], "kind": row["kind"], "hardware": row["hardware"], "model": row["model"],
               "metric": row["metric"], "unit": row.get("unit", ""), "published": _float(row, "value", where),
               "predicted": None, "error": None, "status": "ok", "calibration": None, "engine": None}
        if serving is not None and row["kind"] == "inference" and row["metric"] in SERVING_METRICS:
            out.append(serving.project(rec, row, where))
            continue
        if row["kind"] == "training":
            out.append(_training(rec, row, calibration))
            continue
        if row["kind"] != "inference" or row["metric"] not in METRICS:
            rec["status"] = f"{row['kind']} metric {row['metric']!r} not projected"
            out.append(rec)
            continue
        hw = resolve_hardware(row["hardware"])
        model = resolve_model(row["model"])
        release, families = table_release(row, release_tables, lambda: setup(
            hw, model, calibration=calibration, engine=engine_of(row, engine)).profile)
        sc = _scenario_for(row, where, engine, model, release).with_(mode=mode)
        try:  # a row whose engine does not run on its part is refused like one that does not fit
            resolved = resolve_scenario(sc, hw, model)
        except InputError as e:
            rec["status"] = f"does not fit: {e.detail}"
            out.append(rec)
            continue
        prof = setup(hw, model, calibration=calibration, engine=sc.engine, release=sc.engine_release,
                     release_families=collective_families(families, model, resolved)).profile
        try:
            proj = project_resolved(hw, model, resolved, prof)
        except InputError as e:
            rec["status"] = f"does not fit: {e.detail}"
            out.append(rec)
            continue
        key = METRICS[row["metric"]]
        value = {"throughput_tok_s_per_gpu": proj.throughput_tok_s_per_gpu, "ttft_ms": proj.ttft_s * 1e3,
                 "tpot_ms": proj.tpot_s * 1e3, "throughput_tok_s": proj.throughput_tok_s}[key]
        rec.update(predicted=value, error=value / rec["published"] - 1.0, calibration=prof.label,
                   engine=proj.scenario.engine)
        out.append(rec)
    return out


class _Serving:
    """Projects serving-benchmark rows (module doc); keeps what rows share: specs, models, profiles,
    step-time tables and whole simulations (a measurement's ttft and tpot rows)."""

    def __init__(self, calibration, mode: str, engine: str, release_tables: bool | None = None,
                 schedule: str | None = None,
                 closed_loop_start: str = "burst"):
        self.calibration, self.mode, self.engine = calibration, mode, engine
        self.release_tables, self.schedule, self.closed_loop_start = release_tables, schedule, closed_loop_start
        self.hw: dict = {}
        self.models: dict = {}
        self.profiles: dict = {}
        self.tables: dict = {}  # step-time tables (perfmodel.serve.simulate.build_instance)
        self.runs: dict = {}  # scenario -> simulation result, or the InputError it raised

    def _resolve(self, cache: dict, key: str, load):
        if key not in cache:
            try:
                cache[key] = load(key)
            except InputError as e:
                cache[key] = e
        return cache[key]

    def project(self, rec: dict, row: dict, where: str) -> dict:
        rec.update(concurrency=None, checkpoint=(row.get("hf_model") or "").strip() or row["model"],
                   engine=self._engine(row), reason="projected")
        status = self._refusal(row, where, rec)
        if status is not None:
            rec["reason"], rec["status"] = status
            return rec
        from .releases import collective_families
        from .resolve import resolve_hardware, resolve_model, resolve_scenario
        from .scenario import Scenario

        hw = self._resolve(self.hw, row["hardware"].strip(), resolve_hardware)
        if isinstance(hw, InputError):
            rec["reason"], rec["status"] = "no hardware spec", f"no hardware spec: {hw.detail}"
            return rec
        model = self._resolve(self.models, row["model"].strip(), resolve_model)
        if isinstance(model, InputError):
            rec["reason"], rec["status"] = "no model descriptor", f"no model descriptor for {row['model'].strip()}"
            return rec
        if row_format(row, model) == "int4":  # int4 as the checkpoint's own expert format is priced (row_format)
            rec["reason"], rec["status"] = "int4", "int4 for every weight: not a format of the cost model"
            return rec
        sides = rec.pop("disagg", None)
        layout = (_moe_layout_refusal(row, where, model) or _squared_layout_refusal(row, where, hw) if sides is None
                  else next((r for r in (_side_moe_refusal(side, model) for side in sides.values()) if r), None))
        if layout is not None:
            rec["reason"], rec["status"] = layout
            return rec
        release, families = table_release(row, self.release_tables, lambda: self._profile(hw, rec["engine"], None))
        opts = None
        try:
            if sides is None:
                sc = Scenario(batch="max", **row_layout(row, where, model), engine=rec["engine"],
                              engine_release=release, **release_settings(row, rec["engine"]), mode=self.mode,
                              schedule=self.schedule).validated()
                sc = sc.with_(batch=admission_cap(sc, hw, model))
            else:
                sc, opts = disagg_scenario(row, where, sides, model, rec["engine"], self.mode, release)
            if release:
                families = collective_families(families, model, resolve_scenario(sc, hw, model))
        except InputError as e:
            if e.file:  # a malformed cell of the table: bad input
                raise
            rec["reason"], rec["status"] = "projection refused", f"not projected: {e}"
            return rec
        prof = self._profile(hw, rec["engine"], release, families)
        # the layout's class, for the summary: one scheduler (tp), attention-DP ranks, or disaggregated workers
        rec["layout"] = "disaggregated" if sides is not None else "attention-dp" if sc.attention_dp > 1 else "tp"
        rec["architecture"] = "moe" if model.moe is not None else "dense"  # the issue-25 class: MoE against dense
        result = self._simulate(hw, model, prof, sc, rec["concurrency"], opts)
        if isinstance(result, InputError):
            rec["reason"], rec["status"] = "projection refused", f"not projected: {result}"
            return rec
        value = result[SERVING_METRICS[row["metric"]]]["mean"]
        if value is None:
            rec["reason"], rec["status"] = "projection refused", "not projected: no request to measure"
            return rec
        rec.update(predicted=value, error=value / rec["published"] - 1.0, calibration=prof.label,
                   engine=result["scenario"]["engine"])
        # diagnostic, never the prediction: the same mean over the first C requests (the initial burst)
        rec["first_wave"] = result["closed_loop"]["first_wave"][SERVING_METRICS[row["metric"]]]
        return rec

    def _profile(self, hw, engine: str, release: str | None, families: frozenset[str] | None = None):
        """The profile of ``engine`` on ``hw`` with the tables of ``release`` in ``families`` (None: every family it
        measured; release None: the engine folder's own)."""
        from .resolve import setup

        key = (hw.key, engine, release, families)
        if key not in self.profiles:
            self.profiles[key] = setup(hw, calibration=self.calibration, engine=engine, release=release,
                                       release_families=families).profile
        return self.profiles[key]

    def _engine(self, row: dict) -> str:
        if self.engine != "auto":
            return self.engine
        return (row.get("engine") or "").strip().lower() or engine_of(row, "auto")

    def _refusal(self, row: dict, where: str, rec: dict) -> tuple[str, str] | None:
        """(reason, status) of a row the simulator cannot express; None if it can. Sets the concurrency."""
        mode = (row.get("mode") or "agg").strip().lower()
        if mode not in ("agg", "disagg"):
            raise InputError(f"expected agg or disagg, got {row.get('mode')!r}", file=where, field="mode")
        if mode == "disagg":
            sides = disagg_sides(row)
            if sides is None:
                return "disaggregated layout not recorded", ("disaggregated prefill/decode workers whose worker "
                                                            "count, TP or PP the row does not record")
            rec["disagg"] = sides
        adp = _optional_int(row, "attention_dp", where) or 1
        conc = _optional_int(row, "concurrency", where)
        if not conc:
            return "concurrency not recorded", "the client's concurrency is not recorded"
        rec["concurrency"] = conc
        if mode == "disagg":
            return None
        batch = _optional_int(row, "batch", where)
        if batch is not None and batch * adp != conc and batch != conc:  # per attention-DP rank, or per worker
            return "batch differs from concurrency", (
                f"batch {batch} per worker against client concurrency {conc}: more than one worker or attention "
                "DP rank, which the row does not record")
        return None

    def _simulate(self, hw, model, prof, sc, conc: int, opts=None):
        """Mean steady-state TTFT and TPOT of ``conc`` requests in flight (perfmodel.serve), once per scenario;
        ``opts``: the serving options of a disaggregated layout."""
        key = (hw.key, model.key, prof.label, sc, conc, opts)
        if key not in self.runs:
            from .serve.simulate import ServeOptions, simulate
            from .serve.workload import closed_loop_default_requests, closed_loop_requests, parse_dist

            isl, osl = parse_dist(str(sc.isl), field="isl"), parse_dist(str(sc.osl), field="osl")
            reqs = closed_loop_requests(closed_loop_default_requests(conc), conc, isl, osl,
                                        start=self.closed_loop_start)
            try:
                self.runs[key] = simulate(hw, model, sc, prof, reqs, opts or ServeOptions(), cache=self.tables)
            except InputError as e:
                self.runs[key] = e
        return self.runs[key]


def disagg_sides(row: dict) -> dict | None:
    """A disaggregated row's prefill ("P") and decode ("D") worker layouts (perfmodel.imports.aic_silicon writes
    them into ``notes``), or None where the worker count, TP or PP of a side is not recorded."""
    sides = disagg_layouts(row.get("notes") or "")
    if sides is None or any(side[k] is None for side in sides.values() for k in ("workers", "tp", "pp")):
        return None
    return sides


def _side_moe_refusal(side: dict, model) -> tuple[str, str] | None:
    adp, ep, moe_tp = side["attention_dp"] or 1, side["moe_ep"] or 1, side["moe_tp"]
    if model.moe is None or moe_tp is None or moe_tp * ep == side["tp"] * adp:
        return None
    return "MoE layout not expressible", (f"{LAYOUT_ISSUE} (a worker's moe_tp {moe_tp} x moe_ep {ep} is not the "
                                          f"{side['tp'] * adp} GPUs of tp {side['tp']} x attention_dp {adp})")


def _side_layout(side: dict) -> tuple:
    """Scenario fields of one disaggregated side beyond TP: PP, attention DP, EP, and the worker's batch limit
    (the row's batch is per attention-DP rank)."""
    adp = side["attention_dp"] or 1
    fields = [("pp", side["pp"]), ("attention_dp", adp), ("ep", side["moe_ep"] or 1)]
    if side["batch"]:
        fields.append(("max_batch", side["batch"] * adp))
    return tuple(fields)


def disagg_scenario(row: dict, where: str, sides: dict, model, engine: str, mode: str, release: str | None = None):
    """(scenario, serving options) of a disaggregated row: X prefill and Y decode workers, each side with its
    own TP, PP, attention DP, EP and batch limit, the KV cache moving from one to the other."""
    from .scenario import Scenario
    from .serve.simulate import ServeOptions

    p, d = sides["P"], sides["D"]
    # no engine front end: these deployments stream through one of their own (Dynamo's, a router's) in front of the
    # workers, which the engine's one measured server does not stand for; their streams show it (docs/engines.md,
    # "The front end": DeepSeek-V3's decode at 8,192 clients, 22.7 ms a token, is 360,000 events a second)
    sc = Scenario(isl=_int(row, "isl", where), osl=_int(row, "osl", where), batch="max", tp=d["tp"],
                  dtype=row_format(row, model), engine=engine, mode=mode, engine_release=release, api_servers=0,
                  **release_settings(row, engine), **dict(_side_layout(d))).validated()
    opts = ServeOptions(disagg=(p["workers"], d["workers"]), prefill_tp=p["tp"], decode_tp=d["tp"],
                        prefill_layout=_side_layout(p), decode_layout=_side_layout(d))
    return sc, opts


def _moe_layout_refusal(row: dict, where: str, model) -> tuple[str, str] | None:
    """A MoE model's row whose MoE tensor x expert parallel degrees do not cover its tp x attention_dp GPUs
    (the scenario spreads every MoE layer over all of them); dense models' moe columns mean nothing."""
    if model.moe is None:
        return None
    adp = _optional_int(row, "attention_dp", where) or 1
    ep = _optional_int(row, "moe_ep", where) or 1
    moe_tp = _optional_int(row, "moe_tp", where)
    tp = _int(row, "tp", where)
    if moe_tp is not None and moe_tp * ep != tp * adp:
        return "MoE layout not expressible", (f"{LAYOUT_ISSUE} (moe_tp {moe_tp} x moe_ep {ep} is not the "
                                              f"{tp * adp} GPUs of tp {tp} x attention_dp {adp})")
    return None


_RUN_NAME = re.compile(r"run name: tp (\d+) ep (\d+|none)")


def _squared_layout_refusal(row: dict, where: str, hw) -> tuple[str, str] | None:
    """A run of N GPUs recorded as N x N. In aiconfigurator-core 0.12.0's silicon sample, 234 aggregated lines whose
    ``id`` names their layout (``..._tp8_0_ep8_0_973``, the importer's ``run name`` note) record tp x attention_dp
    = N x N for a run the name gives as tp N, ep N (SGLang and TensorRT-LLM: moe_tp = moe_ep = N; vLLM: moe_ep = N x N);
    every other named row records the GPUs its name states. The measurements agree with the name (B200 SGLang
    DeepSeek-V3 fp4, 1024/1024 at concurrency 4: TPOT 8.05 ms recorded at "tp 64" against 8.31 ms at tp 8; a
    64-GPU attention group would all-reduce across eight boxes twice a layer). Rows of the same configurations
    without a name are known by the same sizes on more GPUs than the part's box holds. Which N-GPU layout ran
    (TP N or attention DP N beside EP N) the row does not say: refused, not guessed."""
    adp = _optional_int(row, "attention_dp", where) or 1
    ep = _optional_int(row, "moe_ep", where) or 1
    moe_tp = _optional_int(row, "moe_tp", where) or 1
    gpus = _int(row, "tp", where) * adp
    named = _RUN_NAME.search(row.get("notes") or "")
    if named:
        n = int(named.group(1))
        squared = gpus != n and gpus == n * n
    else:
        n = int(round(gpus ** 0.5))
        squared = (gpus > hw.scaleup_domain and n * n == gpus
                   and ((moe_tp == ep == n) or (moe_tp == 1 and ep == gpus and adp == n)))
    if not squared:
        return None
    return "layout recorded squared", (f"tp {gpus // adp} x attention_dp {adp} (moe_tp {moe_tp} x moe_ep {ep}) records "
                                       f"{n} x {n} GPUs for a run of {n} "
                                       f"({'its name: ' + named.group(0)[10:] if named else 'no name; the sizes of the named such rows'}); "
                                       "which layout of them ran is not recorded")


def admission_cap(sc, hw, model) -> int | str:
    """The running-sequence cap a serving row is simulated with, by how the engine admits requests.

    The preset's ``admission`` (:mod:`perfmodel.engines`, with its source): ``no_evict`` (TensorRT-LLM's
    ``GUARANTEED_NO_EVICT``) starts a request only when the KV cache can hold it to its last token: ``--batch
    max``, the KV-limited batch of the full request; ``preempt`` (vLLM, SGLang) admits while free blocks hold the
    prompt and preempts or retracts when decoding runs out of blocks, which is the simulator's scheduler: the
    engine's sequence limit, blocks deciding the rest."""
    from .engines import ENGINES
    from .resolve import resolve_scenario

    if sc.engine in ENGINES and ENGINES[sc.engine].admission == "no_evict":
        return "max"
    return int(resolve_scenario(sc, hw, model).max_batch)


def row_layout(row: dict, where: str, model) -> dict:
    """The Scenario fields an aggregated serving row records: lengths, TP, PP, attention DP, EP and format."""
    return dict(isl=_int(row, "isl", where), osl=_int(row, "osl", where), tp=_int(row, "tp", where),
                pp=_int(row, "pp", where), attention_dp=_optional_int(row, "attention_dp", where) or 1,
                ep=_optional_int(row, "moe_ep", where) or 1, dtype=row_format(row, model))


def release_settings(row: dict, engine: str) -> dict:
    """The Scenario field that runs the defaults of the engine release a row records (a dated nightly's: the release
    it stands nearest, :func:`perfmodel.engines.numbered_release`), where its source was read
    (``defaults_release``: :func:`perfmodel.engines.release_defaults`, scheduling, the shared-expert stream, the MoE
    layout by part and model), its kernel tables left to ``--release-tables``; {}: the preset's."""
    from .engines import numbered_release

    version = numbered_release(engine, row.get("engine_version"))
    return {"defaults_release": version} if version else {}


def _optional_int(row: dict, col: str, where: str) -> int | None:
    text = (row.get(col) or "").strip()
    return _int(row, col, where) if text else None


def _training(rec: dict, row: dict, calibration) -> dict:
    """A training row, projected by perfmodel.train."""
    from .train.validate import training_value

    try:
        value, label = training_value(row, calibration)
    except InputError as e:
        rec["status"] = f"not projected: {e.detail}"
        return rec
    rec.update(predicted=value, error=value / rec["published"] - 1.0, calibration=label, engine="megatron")
    return rec


def _stats(groups: dict[str, list[float]]) -> dict:
    return {k: {"n": len(v), "median_abs_error": statistics.median(abs(x) for x in v),
                "signed_median": statistics.median(v)} for k, v in sorted(groups.items())}


def summary(rows: list[dict]) -> dict:
    """Median |error| overall and by metric, and the median and signed median by part and metric; for
    serving-benchmark rows also by part x engine x metric, by model checkpoint x metric, and the coverage
    (rows by reason: projected, or why not), by layout class x metric (one scheduler, attention-DP ranks,
    disaggregated workers) and by architecture x metric (mixture-of-experts or dense)."""
    done = [r for r in rows if r["error"] is not None]
    by_metric: dict[str, list[float]] = {}
    by_part: dict[str, list[float]] = {}
    by_engine: dict[str, list[float]] = {}
    by_model: dict[str, list[float]] = {}
    by_layout: dict[str, list[float]] = {}
    by_architecture: dict[str, list[float]] = {}
    burst: dict[str, list[float]] = {}
    coverage: dict[str, int] = {}
    for r in done:
        by_metric.setdefault(r["metric"], []).append(r["error"])
        by_part.setdefault(f"{r['hardware']} {r['metric']}", []).append(r["error"])
    for r in rows:
        if "reason" not in r:
            continue
        coverage[r["reason"]] = coverage.get(r["reason"], 0) + 1
        if r["error"] is not None:
            by_engine.setdefault(f"{r['hardware']} {r['engine']} {r['metric']}", []).append(r["error"])
            by_model.setdefault(f"{r['checkpoint']} {r['metric']}", []).append(r["error"])
            by_layout.setdefault(f"{r['layout']} {r['metric']}", []).append(r["error"])
            by_architecture.setdefault(f"{r['architecture']} {r['metric']}", []).append(r["error"])
            if r.get("first_wave"):
                burst.setdefault(f"{r['engine']} {r['metric']}", []).append(r["first_wave"] / r["published"] - 1.0)
    out = {"rows": len(done), "refused": sum(1 for r in rows if r["status"].startswith("does not fit")),
           "median_abs_error": statistics.median(abs(r["error"]) for r in done) if done else None,
           "by_metric": {k: statistics.median(abs(x) for x in v) for k, v in by_metric.items()},
           "by_part": _stats(by_part)}
    if coverage:
        out["serving"] = {"coverage": dict(sorted(coverage.items(), key=lambda kv: (-kv[1], kv[0]))),
                          "by_part_engine": _stats(by_engine), "by_model": _stats(by_model),
                          "by_layout": _stats(by_layout), "by_architecture": _stats(by_architecture),
                          "first_wave_by_engine": _stats(burst)}
    return out


def validation_table(rows: list[dict], *, summary_only: bool = False) -> str:
    lines = [] if summary_only else [
        f"{'id':<34}{'hardware':<15}{'metric':<27}{'published':>11}{'predicted':>11}{'error':>9}  calibration"]
    for r in [] if summary_only else rows:
        if r["predicted"] is None:
            lines.append(f"{r['id']:<34}{r['hardware']:<15}{r['metric']:<27}{r['published']:>11.4g}{'-':>11}{'':>9}  "
                         f"{r['status']}")
            continue
        run = f"; {r['engine']} at concurrency {r['concurrency']}" if "reason" in r else ""
        lines.append(f"{r['id']:<34}{r['hardware']:<15}{r['metric']:<27}{r['published']:>11.4g}"
                     f"{r['predicted']:>11.4g}{r['error']:>+9.1%}  {r['calibration']}{run}")
    s = summary(rows)
    if not rows:
        lines.append("no rows (an empty table, or none that --where and --limit keep)")
    if s["median_abs_error"] is not None:
        lines.append("")
        lines.append(f"median |error| over {s['rows']} projected rows: {s['median_abs_error']:.1%}  ("
                     + ", ".join(f"{k} {v:.1%}" for k, v in s["by_metric"].items()) + ")"
                     + (f"; {s['refused']} refused for memory" if s["refused"] else ""))
        lines.append("by part and metric (median |error|, signed median):")
        for k, v in s["by_part"].items():
            lines.append(f"  {k:<44} n={v['n']:<3} {v['median_abs_error']:>6.1%}  {v['signed_median']:>+7.1%}")
    if "serving" in s:
        lines += _serving_lines(s["serving"], len(rows))
    return "\n".join(lines)


def _serving_lines(sv: dict, total: int) -> list[str]:
    """The serving-benchmark summaries: coverage, by part x engine x metric, by model x metric."""
    n = sum(sv["coverage"].values())
    lines = ["", f"serving-benchmark rows: {n} (closed-loop simulation; steady-state mean TTFT and mean TPOT)"]
    lines += [f"  {k:<40} {v:>6}  {v / n:>6.1%}" for k, v in sv["coverage"].items()]
    for title, key in (("by part, engine and metric", "by_part_engine"), ("by model and metric", "by_model"),
                       ("by layout class and metric", "by_layout"),
                       ("by architecture and metric", "by_architecture"),
                       ("diagnostic, not the prediction: the mean over the first C requests (the initial burst) "
                        "instead of the steady state, by engine and metric", "first_wave_by_engine")):
        if not sv[key]:
            continue
        lines.append(f"{title} (n, median |error|, signed median):")
        for k, v in sv[key].items():
            lines.append(f"  {k:<52} n={v['n']:<5} {v['median_abs_error']:>7.1%}  {v['signed_median']:>+8.1%}")
    return lines


def validation_csv(rows: list[dict]) -> str:
    from .io import csv_dicts_text

    cols = ["id", "kind", "hardware", "model", "metric", "unit", "published", "predicted", "error", "status",
            "calibration", "engine"]
    if any("reason" in r for r in rows):
        cols += ["concurrency", "checkpoint", "layout", "architecture", "reason", "first_wave"]
    return csv_dicts_text(cols, rows)
