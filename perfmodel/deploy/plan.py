"""Reading the plan JSON ``perfmodel plan --format json`` writes, and choosing the layout to deploy.

Every problem with the file is one :class:`~perfmodel.errors.InputError` naming the file and the field (exit 2
at the command line). What a candidate row holds (``perfmodel/serve/plan.py``): ``layout`` (aggregated or
disaggregated), ``tp``, ``pp``, ``batch`` (the running-sequence cap; the decode side's when disaggregated),
``instances`` or ``prefill_instances`` / ``decode_instances`` and ``decode_tp``, ``gpus``, ``engine``, ``rank``
and the predicted figures; a capacity plan's row (``perfmodel/serve/capacity_plan.py``) also names the part of
each role (``arch``, or ``prefill_arch`` and ``decode_arch``: two parts when prefill and decode run on different
ones). The scenario the plan ran under (weights and KV-cache format, expert and attention
data parallelism, MTP, the engine's token budget and memory share) is read from a ``scenario`` mapping at the
top of the document or in the row when the plan carries one (the keys ``perfmodel project --format json``
writes under ``scenario``); what neither holds is left to the engine's defaults and said so in README.txt.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import InputError
from ..io import loads_json, read_input_bytes
from ..safeyaml import CONTROL, printable

MAX_PLAN_BYTES = 64 << 20
WHAT = "a plan JSON (perfmodel plan --format json)"

# scenario keys deploy reads, and their types
SCENARIO_KEYS = {"ep": "int", "attention_dp": "int", "mtp": "int", "draft": "str", "dtype": "str",
                 "kv_dtype": "str", "prefill_chunk": "int", "mem_fraction": "float", "engine": "str",
                 "moe_exchange": "str", "api_servers": "int"}
METRICS = ("ttft_p90_ms", "tpot_p90_ms", "throughput_tok_s", "goodput_req_s", "goodput_tok_s_per_gpu", "rate_req_s",
           "attainment", "joules_per_token")


@dataclass(frozen=True)
class Layout:
    """The chosen candidate, every field checked."""
    mode: str  # aggregated | disaggregated
    rank: int
    describe: str
    plan_engine: str | None  # the engine the plan predicted it for
    tp: int  # aggregated: each instance's; disaggregated: each prefill instance's
    pp: int
    batch: int  # running-sequence cap (disaggregated: of a decode instance)
    gpus: int  # all the layout uses
    instances: int = 1  # aggregated
    prefill_instances: int = 0
    decode_instances: int = 0
    decode_tp: int = 0
    scenario: dict = field(default_factory=dict)  # the SCENARIO_KEYS the plan recorded
    metrics: dict = field(default_factory=dict)  # METRICS the row holds (None where it has none)
    # capacity plans: the part each role runs on, {role: (key, name, vendor)} (serve | prefill | decode); empty:
    # the document's arch
    parts: dict = field(default_factory=dict)

    @property
    def mixed(self) -> bool:
        """Prefill on one part, decode on another (two kinds of host)."""
        return len({v[0] for v in self.parts.values()}) > 1

    @property
    def attention_dp(self) -> int:
        return self.scenario.get("attention_dp", 1)

    @property
    def ep(self) -> int:
        return self.scenario.get("ep", 1)

    @property
    def mtp(self) -> int:
        return self.scenario.get("mtp", 0)

    def instance_gpus(self, tp: int) -> int:
        return tp * self.pp * self.attention_dp


@dataclass(frozen=True)
class Plan:
    path: str
    model_key: str
    model_name: str
    arch_key: str
    arch_name: str
    vendor: str
    slo: dict
    attainment: float | None
    workload: dict
    candidates: tuple  # the raw rows, in file order
    scenario: dict  # the document's scenario mapping (checked keys only)


def read_plan(path: str) -> Plan:
    """The plan at ``path``, its top-level fields checked (the candidates are checked when one is chosen)."""
    data = read_input_bytes(path, what=WHAT, max_bytes=MAX_PLAN_BYTES)
    doc = loads_json(data, file=str(path), what=WHAT)
    if not isinstance(doc, dict) or "candidates" not in doc:
        raise InputError(f"not a plan JSON: no 'candidates' list; expected {WHAT}", file=str(path),
                         field="candidates")
    rows = doc["candidates"]
    if not isinstance(rows, list) or not rows:
        raise InputError("expected a non-empty list of layouts", file=str(path), field="candidates")
    model = _mapping(doc, "model", path)
    arch = doc.get("arch") if isinstance(doc.get("arch"), dict) else {}
    scenario = _scenario(doc.get("scenario", {}), path, "scenario")
    slo = doc.get("slo") if isinstance(doc.get("slo"), dict) else {}
    workload = doc.get("workload") if isinstance(doc.get("workload"), dict) else {}
    attainment = doc.get("attainment")
    return Plan(path=str(path), model_key=_text(model, "key", path, "model.key"),
                model_name=_text(model, "name", path, "model.name", required=False) or "",
                arch_key=_plain(arch.get("key")), arch_name=_plain(arch.get("name")),
                vendor=_plain(arch.get("vendor")) or "nvidia", slo={k: v for k, v in slo.items() if _number(v)},
                attainment=attainment if _number(attainment) else None,
                workload={k: v for k, v in workload.items() if isinstance(k, str) and (_number(v) or isinstance(v, str))},
                candidates=tuple(rows), scenario=scenario)


def choose(plan: Plan, rank: int | None, engine: str) -> tuple[Layout, str | None]:
    """The candidate of ``rank``; without one, the best-ranked planned for ``engine`` (else rank 1). Returns
    it and a note when the plan predicted it for another engine."""
    ranked = []
    for i, row in enumerate(plan.candidates):
        where = f"candidates[{i}]"
        if not isinstance(row, dict):
            raise InputError("expected a mapping (one layout)", file=plan.path, field=where)
        ranked.append((_int(row, "rank", plan.path, where, default=i + 1), i, row))
    if rank is not None:
        hits = [(r, i, row) for r, i, row in ranked if r == rank]
        if not hits:
            ranks = sorted(r for r, _, _ in ranked)
            raise InputError(f"rank {rank} is out of range: the plan ranks {len(ranks)} layouts "
                             f"({ranks[0]}..{ranks[-1]})", file=plan.path, field="--rank")
        picked = hits[0]
    else:
        ordered = sorted(ranked, key=lambda t: (t[0], t[1]))
        same = [t for t in ordered if t[2].get("engine") == engine]
        picked = (same or ordered)[0]
    layout = _layout(plan, picked[2], picked[1], picked[0])
    note = None
    if layout.plan_engine and layout.plan_engine != engine:
        note = (f"the plan predicted rank {layout.rank} for engine {printable(layout.plan_engine, 20)}, not "
                f"{engine}: its figures are that engine's, and {engine}'s own defaults fill what the plan "
                "does not record")
    return layout, note


def _layout(plan: Plan, row: dict, i: int, rank: int) -> Layout:
    where = f"candidates[{i}]"
    path = plan.path
    mode = row.get("layout")
    if mode not in ("aggregated", "disaggregated"):
        raise InputError(f"expected 'aggregated' or 'disaggregated', got {printable(repr(mode), 40)}", file=path,
                         field=f"{where}.layout")
    engine = row.get("engine")
    scenario = dict(plan.scenario)
    scenario.update(_scenario({k: row[k] for k in SCENARIO_KEYS if k in row}, path, where))
    if engine is not None and not isinstance(engine, str):
        raise InputError("expected an engine name", file=path, field=f"{where}.engine")
    plan_engine = engine or scenario.get("engine")
    if plan_engine is not None and scenario.get("engine") not in (None, plan_engine):
        scenario = {}  # the document's scenario belongs to another engine's rows: not this row's
    kw = dict(mode=mode, rank=rank, describe=_plain(row.get("describe")) or mode, plan_engine=plan_engine,
              tp=_int(row, "tp", path, where), pp=_int(row, "pp", path, where, default=1),
              batch=_int(row, "batch", path, where), gpus=_int(row, "gpus", path, where), scenario=scenario,
              metrics={k: row.get(k) if _number(row.get(k)) else None for k in METRICS})
    if mode == "aggregated":
        kw["instances"] = _int(row, "instances", path, where)
    else:
        kw.update(prefill_instances=_int(row, "prefill_instances", path, where),
                  decode_instances=_int(row, "decode_instances", path, where),
                  decode_tp=_int(row, "decode_tp", path, where))
        if kw["pp"] != 1:
            raise InputError(f"a disaggregated layout runs pp 1, got {kw['pp']}", file=path, field=f"{where}.pp")
    kw["parts"] = _parts(row, mode, path, where)
    lay = Layout(**kw)
    if mode == "aggregated":
        used = lay.instances * lay.instance_gpus(lay.tp)
        shape = f"{lay.instances} x (tp {lay.tp} x pp {lay.pp} x attention-dp {lay.attention_dp})"
    else:
        used = lay.prefill_instances * lay.instance_gpus(lay.tp) + lay.decode_instances * lay.instance_gpus(lay.decode_tp)
        shape = (f"{lay.prefill_instances} x tp {lay.tp} + {lay.decode_instances} x tp {lay.decode_tp}, "
                 f"attention-dp {lay.attention_dp}")
    if used != lay.gpus:
        raise InputError(f"{lay.gpus} GPUs do not add up to the layout's {shape} = {used}: the plan leaves out "
                         "a parallel degree deploy cannot guess", file=path, field=f"{where}.gpus")
    return lay


def _parts(row: dict, mode: str, path, where: str) -> dict:
    """The part of each role a capacity plan's row names (``arch``; ``prefill_arch`` and ``decode_arch`` when
    disaggregated); {} when the row names none (a plan of one part: the document's ``arch``)."""
    keys = ("arch",) if mode == "aggregated" else ("prefill_arch", "decode_arch")
    roles = ("serve",) if mode == "aggregated" else ("prefill", "decode")
    out = {}
    for key, role in zip(keys, roles):
        v = row.get(key)
        if v is None:
            continue
        if not isinstance(v, dict):
            raise InputError("expected a mapping (key, name, vendor of a part)", file=str(path), field=f"{where}.{key}")
        out[role] = (_text(v, "key", path, f"{where}.{key}.key"),
                     _plain(v.get("name")) or _plain(v.get("key")), _plain(v.get("vendor")) or "nvidia")
    if out and len(out) != len(roles):
        raise InputError(f"names the part of one role only; expected {' and '.join(keys)}", file=str(path),
                         field=f"{where}.{keys[-1]}")
    return out


def _scenario(d, path, where) -> dict:
    if not isinstance(d, dict):
        raise InputError("expected a mapping", file=path, field=where)
    out = {}
    for k, kind in SCENARIO_KEYS.items():
        v = d.get(k)
        if v is None:
            continue
        at = f"{where}.{k}"
        if kind == "int":
            least = 0 if k in ("mtp", "api_servers") else 1
            if not (isinstance(v, int) and not isinstance(v, bool)) or v < least:
                raise InputError(f"expected an integer >= {least}, got {printable(repr(v), 40)}", file=path,
                                 field=at)
        elif kind == "float":
            if not _number(v) or not 0 < v <= 1:
                raise InputError(f"expected a share in (0, 1], got {printable(repr(v), 40)}", file=path, field=at)
        elif not isinstance(v, str) or not v.strip() or CONTROL.search(v):
            raise InputError("expected printable text", file=path, field=at)
        out[k] = v
    return out


def _mapping(doc: dict, key: str, path) -> dict:
    v = doc.get(key)
    if not isinstance(v, dict):
        raise InputError(f"expected a mapping; expected {WHAT}", file=str(path), field=key)
    return v


def _text(d: dict, key: str, path, where: str, *, required: bool = True) -> str | None:
    v = d.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v.strip():
        raise InputError("expected a name", file=str(path), field=where)
    if CONTROL.search(v):
        raise InputError("control characters in a name", file=str(path), field=where)
    return v


def _plain(v) -> str:
    return printable(v, 200) if isinstance(v, str) else ""


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _int(row: dict, key: str, path, where: str, *, default: int | None = None) -> int:
    v = row.get(key, default)
    if v is None:
        raise InputError(f"missing; a layout needs {key}", file=str(path), field=f"{where}.{key}")
    if not (isinstance(v, int) and not isinstance(v, bool)) or v < 1:
        raise InputError(f"expected an integer >= 1, got {printable(repr(v), 40)}", file=str(path),
                         field=f"{where}.{key}")
    return v
