"""Collectives as measured: an engine folder's own collective rows anchor the fitted alpha-beta model on its part.

The fit (:mod:`perfmodel.fit.collectives`) gives each collective and world size one latency and one bus bandwidth;
an engine's all-reduce (one-shot kernels at small buffers, two-shot or NCCL at large ones) follows neither across its
sizes, and at the sizes of a decode step's all-reduces the fit misses its own rows most at 8 GPUs
(docs/collectives.md, "What the fitted all-reduce misses"). Where the profile's comm family names an imported engine
folder (``Profile.comm_table``, set as the other families' tables are: :func:`perfmodel.profile.load_profile`, carried
by :func:`perfmodel.evidence.compose`, cleared by :func:`perfmodel.transfer.carry`), the spec is that folder's part
and the projected engine the folder's, a collective inside one scale-up domain at a measured world size is priced

    t = t_fit(hw) x t_table(b) / t_fit_folder(b)

``t_table`` the folder's rows at the buffer's size ``b`` (per-size medians, linear in log time and log bytes between
measured sizes, ``b`` clamped to the measured range), ``t_fit_folder`` the folder's own fitted profile on the library
spec of the part: on the part itself the table's time, on a what-if of its figures the table's residual on their fit
(:mod:`.tables`, "A what-if spec takes the ratio form"). An all-reduce takes the faster of NCCL's rows and the
engine's own (its CUDA-graph series where the table has one: a decode step replays graphs; a prefill step's eager
calls, slower in vLLM's and SGLang's tables, take it too: not told apart yet), as the engines choose and the fit
prices it. Collectives through an engine's own kernels (DeepEP's, TensorRT-LLM's MNNVL all-to-all), at
world sizes the folder did not measure, across domains, or with ``xp`` symbolic (the workbook, which multiplies its
formula by :func:`perfmodel.cost.table_ratio`'s constant) keep the fit.
"""
from __future__ import annotations

import gzip
import json
import math
import statistics
from pathlib import Path

import numpy as np

from ..paths import COLLECTIVES_FILE

# the series a folder's collective rows fall in: NCCL's collectives by op, and the engine's own all-reduce
ENGINE_SERIES = "engine_all_reduce"
_POINTS: dict = {}
_KERNELS: dict = {}


def collective_file(path) -> Path | None:
    """Where a folder's collective rows are read from: its collectives file (written by the import beside its
    measurements: :data:`perfmodel.paths.COLLECTIVES_FILE`), else its measurements; None: neither."""
    from .tables import measurement_file

    own = Path(path) / COLLECTIVES_FILE
    return own if own.is_file() else measurement_file(Path(path))


def write_collectives(folder: Path, rows: list[dict]) -> None:
    """Write ``rows``' collectives to ``folder``'s collectives file (atomically; no file where there are none),
    in their order, with no timestamp in the gzip header: the same rows give the same bytes."""
    from ..io import write_bytes_atomic

    keep = [r for r in rows if isinstance(r, dict) and r.get("kind") == "collective"]
    path = Path(folder) / COLLECTIVES_FILE
    if not keep:
        path.unlink(missing_ok=True)
        return
    text = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in keep)
    write_bytes_atomic(path, gzip.compress(text.encode("utf-8"), mtime=0))


def points(path: str) -> dict[tuple[str, int], tuple[np.ndarray, np.ndarray]]:
    """(series, world size) -> (log bytes, log seconds) at each measured size (the median of its rows), from the
    folder's collective rows (:func:`collective_file`; cached per folder and file state). Only the collective lines
    are parsed (a fifth of the time of :func:`perfmodel.measure.store.read_rows` over the whole file, on a cold
    projection's path); a torn line is skipped, as there."""
    file = collective_file(path)
    stamp = file.stat().st_mtime_ns if file is not None else None
    hit = _POINTS.get(path)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    out: dict[tuple[str, int], dict[float, list[float]]] = {}
    rows = _collective_rows(file)
    engine = _engine_rows(rows)
    graph = next((i for i in sorted({r["params"].get("impl") or "" for r in engine}) if i.endswith("_graph")), None)
    for r in rows:
        p, t = r["params"], r.get("time_s")
        b, w = p.get("bytes"), p.get("world_size")
        if (r.get("error") or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                      and math.isfinite(v) and v > 0 for v in (t, b, w))):
            continue
        backend = p.get("backend")
        if backend == "nccl":
            series = p.get("op")
        elif backend not in ("gloo", None) and p.get("op") == "all_reduce" and (graph is None or p.get("impl") == graph):
            series = ENGINE_SERIES
        else:
            continue
        size = float(b) * (w if p.get("op") == "all_gather" else 1)  # NCCL's buffer
        out.setdefault((series, int(w)), {}).setdefault(size, []).append(float(t))
    found = {}
    for key, sizes in out.items():
        if len(sizes) >= 2:
            at = sorted(sizes)
            found[key] = (np.log(at), np.log([statistics.median(sizes[s]) for s in at]))
    _POINTS[path] = (stamp, found)
    return found


def _collective_rows(file: Path | None) -> list[dict]:
    """The collective rows of a measurements file (only those lines parsed; a torn line skipped)."""
    rows = []
    if file is not None:
        opener = gzip.open if file.suffix == ".gz" else open
        with opener(file, "rt", encoding="utf-8") as f:
            for line in f:
                if '"collective"' in line:
                    try:
                        r = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(r, dict) and r.get("kind") == "collective" and isinstance(r.get("params"), dict):
                        rows.append(r)
    return rows


def _engine_rows(rows: list[dict]) -> list[dict]:
    """The rows of the engine's own all-reduce (not NCCL's, not gloo's)."""
    return [r for r in rows if r["params"].get("op") == "all_reduce"
            and r["params"].get("backend") not in ("nccl", "gloo", None)]


def engine_kernels(path) -> frozenset[str]:
    """The engine's own all-reduce kernels a folder's rows time (their ``impl``: ``sglang_graph``, ``trtllm``; the
    engine's name where a table records none): what tells two releases' tables of one engine apart
    (:func:`perfmodel.releases.same_kernels`)."""
    file = collective_file(path)
    key = (str(path), file.stat().st_mtime_ns if file is not None else None)
    hit = _KERNELS.get(key)
    if hit is None:  # (validate asks for every row: cached per folder and file state)
        rows = _engine_rows(_collective_rows(file))
        hit = _KERNELS[key] = frozenset(str(r["params"].get("impl") or r["params"].get("backend")) for r in rows)
    return hit


def _table_time(series: tuple[np.ndarray, np.ndarray], nbytes: np.ndarray) -> np.ndarray:
    lb, lt = series
    return np.exp(np.interp(np.log(np.clip(nbytes, np.exp(lb[0]), np.exp(lb[-1]))), lb, lt))


def _measured(points: dict, kind: str, p: int, nbytes: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(table time at the sizes clamped into the measured range, the clamped sizes), or None where the folder
    measured no series of ``kind`` at ``p`` ranks."""
    series = [points[k] for k in ((kind, p), (ENGINE_SERIES, p) if kind == "all_reduce" else None) if k in points]
    if not series:
        return None
    lo = min(float(np.exp(s[0][0])) for s in series)
    hi = max(float(np.exp(s[0][-1])) for s in series)
    clamped = np.clip(nbytes, lo, hi)
    times = [np.where((clamped >= np.exp(s[0][0])) & (clamped <= np.exp(s[0][-1])), _table_time(s, clamped), np.inf)
             for s in series]
    return np.minimum.reduce(times) if len(times) > 1 else times[0], clamped


def ratio(op, hw, prof):
    """t_table / t_fit_folder for the collective ``op`` (numbers or arrays of its bytes) on ``hw`` (module doc); None
    where no table applies: the op keeps the fit."""
    path = getattr(prof, "comm_table", "")
    p = op.params
    if not path or p.get("kernel") or op.kind == "p2p":
        return None
    group = p.get("group")
    if not isinstance(group, (int, float)) or group <= 1 or group > hw.scaleup_domain or group != int(group):
        return None
    from ..spec import lineage_rank
    from .comm import collective_time
    from .tables import folder_fit, load_folder, projected_engine

    folder = load_folder(path)
    if folder is None or lineage_rank(folder.part, hw) is None or projected_engine(prof, "comm") != folder.engine:
        return None
    nbytes = np.maximum(np.asarray(p["bytes"], dtype=float), 1.0)
    found = _measured(points(folder.path), op.kind, int(group), nbytes)
    if found is None:
        return None
    table, clamped = found
    own, lib = folder_fit(folder)
    fitted = np.asarray(collective_time(op.kind, clamped, int(group), int(group), lib, own), dtype=float)
    r = table / fitted
    return r.item() if r.ndim == 0 else r
