"""Hugging Face ``transformers`` ``generate()`` measured on one GPU: the host-side costs of eager decode.

Run as ``python -m perfmodel.measure.hf_generate --out DIR [--quick] [--budget-s S]`` (or as the script
``perfmodel/measure/hf_generate.py`` where the package does not import). Models are built from a config
dict with random weights (``AutoModelForCausalLM.from_config``, bf16, ``attn_implementation="sdpa"``, on the
GPU): nothing is downloaded. The configs are ``calibration/hf/configs/*.json`` (each a checkpoint's
``config.json``).

What it measures, each written under ``--out`` as soon as it is measured (temp file + ``os.replace``):

``generate.csv``
    whole-model ``generate()`` (greedy, eos disabled, ``min_new_tokens = max_new_tokens``): TTFT = the time of
    ``generate`` with ``max_new_tokens=1``; TPOT = (time(N) - time(1)) / (N - 1); CUDA-synchronised wall clock,
    one warm-up, median of repeats. Caches: ``dynamic`` (the default, ``torch.cat`` growth), ``static``
    (eager: ``disable_compile=True``; ``max_cache_len`` pinned to isl + N for both calls) and, budget allowing,
    ``static-compile`` (transformers' own automatic ``torch.compile``, mode reduce-overhead), run in a child
    process that is killed at the budget.
``host.csv``
    host-side costs measured directly: eager launch cost of tiny ops, ``nn.Module.__call__`` dispatch, one
    CPU-GPU sync, the dynamic cache's ``torch.cat`` against the static cache's ``index_copy_``, per decoder
    layer host time (a 2-layer and a 4-layer model of each architecture), and the decomposition of a decode
    step: forward alone (no sync), forward + one sync a step, and generate's time per token.
``kernels.csv``
    CUDA kernels by name from ``torch.profiler`` (chrome trace): one prefill, one decode step (generate(1+K)
    minus generate(1), over K), one decoder layer (4-layer minus 2-layer model, over 2), with device-busy
    time (union of kernel, memcpy and memset intervals) against wall time.
``summary.json``, ``environment.json``
    the figures above condensed, errors and skipped parts with their reasons; GPU, driver, clocks, CPU model
    and frequency, torch and transformers versions.

Importing this module never imports torch or transformers: the pure parts (config building, TPOT
arithmetic, row writing, the plan, the budget) are tested without them (tests/test_hf_generate.py).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "calibration" / "hf" / "configs"
MODELS = ("llama-3.1-8b", "llama-3.2-1b", "qwen3-8b")
FAMILY = {"llama-3.1-8b": "llama", "llama-3.2-1b": "llama", "qwen3-8b": "qwen3"}

GENERATE_COLUMNS = (
    "model", "family", "layers", "cache", "batch", "isl", "osl", "ttft_ms", "tpot_ms", "e2e_ms",
    "ttft_samples_ms", "e2e_samples_ms", "reps", "tpot_min_ms", "max_cache_len", "peak_mem_gib", "steal_ms",
    "status", "notes",
)
HOST_COLUMNS = (
    "family", "name", "model", "batch", "ctx", "layers", "wall_us", "issue_us", "device_us", "wall_min_us", "n",
    "unit", "notes",
)
KERNEL_COLUMNS = (
    "model", "cache", "phase", "batch", "ctx", "category", "kernel", "count", "device_us",
)
# keys of the ``Llama/Qwen config.json`` that only describe a checkpoint's files or training, never the compute
_DROP_KEYS = ("transformers_version", "_name_or_path", "quantization_config", "auto_map", "torch_dtype",
              "dtype", "architectures")


# --------------------------------------------------------------------------------------------------------------
# pure python: configs, arithmetic, rows, plan, budget


def load_config(name_or_path: str | os.PathLike, config_dir: Path = CONFIG_DIR) -> dict[str, Any]:
    """A config.json as a dict: a path, or a name under ``config_dir`` (``llama-3.1-8b`` -> ``llama-3.1-8b.json``)."""
    p = Path(name_or_path)
    if not p.is_file():
        p = Path(config_dir) / f"{name_or_path}.json"
    with open(p, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or "model_type" not in data:
        raise ValueError(f"{p}: not a config.json (no model_type)")
    return data


def build_config_dict(base: dict[str, Any], *, layers: int | None = None, shrink: bool = False) -> dict[str, Any]:
    """The kwargs for ``AutoConfig.for_model``: ``base`` less the keys that describe files rather than compute,
    ``use_cache`` on, ``num_hidden_layers`` overridden by ``layers``; ``shrink`` makes a tiny model of the same
    structure (for CPU tests of this module: hidden 64, 4 heads, 2 KV heads, head_dim 16, vocab 512)."""
    cfg = {k: v for k, v in base.items() if k not in _DROP_KEYS}
    cfg["use_cache"] = True
    if layers is not None:
        if int(layers) < 1:
            raise ValueError(f"layers must be at least 1, got {layers!r}")
        cfg["num_hidden_layers"] = int(layers)
        if "max_window_layers" in cfg:
            cfg["max_window_layers"] = min(int(cfg["max_window_layers"]), int(layers))
        if "layer_types" in cfg and isinstance(cfg["layer_types"], list):
            cfg["layer_types"] = cfg["layer_types"][: int(layers)]
    if shrink:
        cfg.update(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                   head_dim=16, vocab_size=512, max_position_embeddings=4096)
    return cfg


def config_facts(cfg: dict[str, Any]) -> dict[str, Any]:
    """Layers, widths and the parameter count of a Llama/Qwen3-style dense decoder config (embeddings included)."""
    h = int(cfg["hidden_size"])
    heads = int(cfg["num_attention_heads"])
    kvh = int(cfg.get("num_key_value_heads") or heads)
    hd = int(cfg.get("head_dim") or h // heads)
    inter = int(cfg["intermediate_size"])
    layers = int(cfg["num_hidden_layers"])
    vocab = int(cfg["vocab_size"])
    per_layer = h * hd * (heads + 2 * kvh) + heads * hd * h + 3 * h * inter + 2 * h
    if cfg.get("model_type") == "qwen3":
        per_layer += 2 * hd  # q_norm, k_norm
    emb = vocab * h * (1 if cfg.get("tie_word_embeddings") else 2)
    return {"layers": layers, "hidden": h, "heads": heads, "kv_heads": kvh, "head_dim": hd,
            "intermediate": inter, "vocab": vocab, "params": per_layer * layers + emb + h,
            "kv_bytes_per_token": 2 * layers * kvh * hd * 2}


def median(values: Iterable[float]) -> float | None:
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return statistics.median(vals) if vals else None


def tpot_ms(t1_s: float | None, tn_s: float | None, n: int) -> float | None:
    """Time per output token from two generate() timings: (time(N) - time(1)) / (N - 1), in ms.
    None when either time is missing or N < 2."""
    if t1_s is None or tn_s is None or int(n) < 2:
        return None
    return (float(tn_s) - float(t1_s)) / (int(n) - 1) * 1e3


def ttft_tpot(t1_samples: list[float], tn_samples: list[float], n: int) -> tuple[float | None, float | None]:
    """(TTFT ms, TPOT ms) from the samples of generate(1) and generate(N) in seconds: medians first."""
    t1, tn = median(t1_samples), median(tn_samples)
    return (None if t1 is None else t1 * 1e3), tpot_ms(t1, tn, n)


def busy_time_us(intervals: Iterable[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals (µs): device-busy time of overlapping kernels."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((float(a), float(b)) for a, b in intervals if b > a):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


_CATEGORIES = (
    ("attention", ("flash", "fmha", "attention", "cudnn", "sdpa", "efficient")),
    ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "splitk", "matmul", "sm90_")),
    ("cat", ("catarray", "cat_")),
    ("index", ("index",)),
    ("reduce", ("reduce", "argmax", "max_")),
    ("memcpy", ("memcpy",)),
    ("memset", ("memset",)),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "fill")),
)


def kernel_category(name: str) -> str:
    low = name.lower()
    for cat, words in _CATEGORIES:
        if any(w in low for w in words):
            return cat
    return "other"


def short_kernel_name(name: str, width: int = 160) -> str:
    name = " ".join(str(name).split())
    return name if len(name) <= width else name[: width - 3] + "..."


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it 0600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        if not math.isfinite(v):
            return ""
        return f"{v:.6g}"
    if isinstance(v, (list, tuple)):
        return ";".join(str(_cell(x)) for x in v)
    return "" if v is None else v


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


class Table:
    """Rows of one CSV, rewritten whole (atomically) after every row: a killed run keeps all it measured."""

    def __init__(self, path: Path, columns: tuple[str, ...]):
        self.path, self.columns, self.rows = Path(path), tuple(columns), []

    def add(self, **row: Any) -> dict[str, Any]:
        unknown = [k for k in row if k not in self.columns]
        if unknown:
            raise KeyError(f"{self.path.name}: unknown column(s) {', '.join(unknown)}")
        full = {c: row.get(c) for c in self.columns}
        self.rows.append(full)
        self.flush()
        return full

    def extend(self, rows: Iterable[dict[str, Any]]) -> None:
        for row in rows:
            unknown = [k for k in row if k not in self.columns]
            if unknown:
                raise KeyError(f"{self.path.name}: unknown column(s) {', '.join(unknown)}")
            self.rows.append({c: row.get(c) for c in self.columns})
        self.flush()

    def flush(self) -> None:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns, lineterminator="\n")
        w.writeheader()
        for row in self.rows:
            w.writerow({c: _cell(row.get(c)) for c in self.columns})
        atomic_write_text(self.path, buf.getvalue())


class JsonDoc:
    """A JSON object kept on disk, rewritten atomically at each ``set``."""

    def __init__(self, path: Path, data: dict[str, Any] | None = None):
        self.path, self.data = Path(path), dict(data or {})
        self.flush()

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.flush()

    def append(self, key: str, value: Any) -> None:
        self.data.setdefault(key, []).append(value)
        self.flush()

    def flush(self) -> None:
        atomic_write_text(self.path, json.dumps(_json_safe(self.data), indent=1, sort_keys=False) + "\n")


class Budget:
    """Wall-clock budget of the whole run: parts ask ``allows(estimate_s)`` before they start."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic, reserve_s: float = 5.0):
        self.seconds, self.clock, self.reserve_s = float(seconds), clock, float(reserve_s)
        self.t0 = clock()

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def left(self) -> float:
        return self.seconds - self.elapsed()

    def allows(self, estimate_s: float) -> bool:
        return self.left() - self.reserve_s >= float(estimate_s)


def plan(quick: bool = False) -> dict[str, Any]:
    """What the run measures, in the order it measures it (most wanted first).

    ``grid``: (model, [(cache, batch, isl)]) whole-model generate points; ``osl``: N; ``layer_points``:
    (batch, ctx) of the per-layer scaling by model ("*": the others); ``decompose``: (batch, isl) of the decode decomposition."""
    if quick:
        return {
            "models": ["llama-3.2-1b"],
            "grid": [("llama-3.2-1b", [("dynamic", 1, 128), ("static", 1, 128)])],
            "osl": 16, "layer_models": ["llama-3.2-1b"], "layer_points": {"*": [(1, 128)]},
            "decompose": [(1, 128)], "profile": [(1, 128)], "profile_steps": 2,
            "compile": [("llama-3.2-1b", 1, 128)],
            "host_n": 300, "cache_points": [(1, 128)], "reps": (2, 2),
        }
    big = [(c, b, i) for i in (128, 1024, 2048) for b in (1, 8, 32) for c in ("dynamic", "static")]
    mid = [(c, b, i) for i in (128, 1024) for b in (1, 8, 32) for c in ("dynamic", "static")]
    return {
        "models": ["llama-3.1-8b", "llama-3.2-1b", "qwen3-8b"],
        "grid": [("llama-3.1-8b", big), ("llama-3.2-1b", mid), ("qwen3-8b", mid)],
        "osl": 64, "layer_models": ["llama-3.1-8b", "llama-3.2-1b", "qwen3-8b"],
        "layer_points": {"llama-3.1-8b": [(1, 128), (32, 1024)], "*": [(1, 128)]},
        "decompose": [(1, 128), (32, 1024)], "profile": [(1, 128), (32, 1024)], "profile_steps": 4,
        "compile": [("llama-3.2-1b", 1, 128), ("llama-3.2-1b", 32, 1024), ("llama-3.1-8b", 1, 128),
                    ("llama-3.1-8b", 8, 1024), ("llama-3.1-8b", 32, 128), ("qwen3-8b", 1, 128),
                    ("qwen3-8b", 32, 1024)],
        "host_n": 2000, "cache_points": [(b, c) for b in (1, 8, 32) for c in (128, 1024, 2048)],
        "reps": (3, 4),
    }


def reps_for(point_s: float, lo: int = 2, hi: int = 4, target_s: float = 6.0) -> int:
    """Repeats of one (generate(1), generate(N)) pair that fit ``target_s``: at least ``lo``, at most ``hi``."""
    if point_s <= 0:
        return hi
    return max(lo, min(hi, int(target_s // point_s)))


def estimate_point_s(params_b: float, batch: int, isl: int, osl: int, tpot_guess_ms: float = 30.0) -> float:
    """A generous guess of one generate(N) (s) before anything is measured: prefill at ~300 TFLOP/s plus N
    decode steps; the budget check uses it for the first point of a model."""
    prefill = 2.0 * params_b * 1e9 * batch * isl / 300e12
    return prefill + osl * tpot_guess_ms * 1e-3 * (1 + batch / 64)


# --------------------------------------------------------------------------------------------------------------
# environment


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        return None


def cpu_steal_ms() -> float | None:
    """Time the hypervisor ran something else on this VM's CPUs (all of them, ms; /proc/stat, 10 ms ticks)."""
    text = _read("/proc/stat")
    if not text or not text.startswith("cpu "):
        return None
    f = text.split("\n", 1)[0].split()
    try:
        return int(f[8]) * 1000.0 / os.sysconf("SC_CLK_TCK")
    except (IndexError, ValueError, OSError):
        return None


class quiet_gc:
    """No garbage collection inside a timed region (a gen-2 pass over a model's objects takes 100s of ms);
    the garbage is collected after it, outside the timing."""

    def __enter__(self):
        import gc

        self.was = gc.isenabled()
        gc.disable()
        return self

    def __exit__(self, *exc):
        import gc

        if self.was:
            gc.enable()
        return False


def settle_gc() -> None:
    """Collect, then freeze what survives (the model, torch, transformers) out of later collections."""
    import gc

    gc.collect()
    if hasattr(gc, "freeze"):
        gc.freeze()


def cpu_info() -> dict[str, Any]:
    out: dict[str, Any] = {"machine": platform.machine(), "cores_visible": None, "cpu_count": os.cpu_count()}
    try:
        out["cores_visible"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    text = _read("/proc/cpuinfo") or ""
    mhz = []
    for line in text.splitlines():
        low = line.lower()
        if low.startswith("model name") and "model" not in out:
            out["model"] = line.split(":", 1)[1].strip()
        elif low.startswith("cpu mhz"):
            try:
                mhz.append(float(line.split(":", 1)[1]))
            except ValueError:
                pass
    if mhz:
        out["cpu_mhz_proc_median"] = statistics.median(mhz)
    for key, path in (("scaling_cur_khz", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"),
                      ("scaling_max_khz", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq"),
                      ("governor", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")):
        v = _read(path)
        if v is not None:
            out[key] = v
    load = _read("/proc/loadavg")
    if load:
        out["loadavg"] = load
    return out


def environment() -> dict[str, Any]:
    doc: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(), "cpu": cpu_info(),
                           "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        from perfmodel.measure.environment import Environment  # import-light; optional

        doc["perfmodel_env"] = Environment("cuda").document()
    except Exception as exc:  # the package may not import on the device: keep going
        doc["perfmodel_env_error"] = repr(exc)
    try:
        import torch

        doc["torch"] = torch.__version__
        doc["cuda"] = torch.version.cuda
        doc["torch_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            doc["gpu"] = {"name": p.name, "sm_count": p.multi_processor_count,
                          "memory_gib": round(p.total_memory / 2**30, 1),
                          "capability": list(torch.cuda.get_device_capability(0))}
            try:
                doc["gpu"]["cudnn"] = torch.backends.cudnn.version()
            except Exception:
                pass
    except Exception as exc:
        doc["torch_error"] = repr(exc)
    try:
        import transformers

        doc["transformers"] = transformers.__version__
    except Exception as exc:
        doc["transformers_error"] = repr(exc)
    try:
        import subprocess

        q = "name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,power.draw,power.limit,temperature.gpu"
        r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=15)
        doc["nvidia_smi"] = dict(zip(q.split(","), [x.strip() for x in r.stdout.strip().split(",")]))
    except Exception as exc:
        doc["nvidia_smi_error"] = repr(exc)
    return doc


# --------------------------------------------------------------------------------------------------------------
# torch parts (imported inside functions only)


class Ctx:
    """Everything a measurement needs: device, tables, budget, plan."""

    def __init__(self, out: Path, plan_: dict, budget: Budget, device: str, shrink: bool):
        import torch

        self.torch = torch
        self.out, self.plan, self.budget, self.device, self.shrink = out, plan_, budget, device, shrink
        self.cuda = device.startswith("cuda")
        self.gen = Table(out / "generate.csv", GENERATE_COLUMNS)
        self.host = Table(out / "host.csv", HOST_COLUMNS)
        self.kern = Table(out / "kernels.csv", KERNEL_COLUMNS)
        self.summary = JsonDoc(out / "summary.json", {"plan": {k: v for k, v in plan_.items()}, "errors": [],
                                                      "skipped": [], "parts": {}})

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def log(self, msg: str) -> None:
        print(f"[{self.budget.elapsed():7.1f}s] {msg}", flush=True)

    def error(self, where: str, exc: BaseException) -> None:
        import traceback

        tb = traceback.format_exc(limit=6)
        self.log(f"ERROR in {where}: {exc!r}")
        self.summary.append("errors", {"where": where, "error": repr(exc)[:500], "traceback": tb[-2000:]})

    def skip(self, what: str, why: str) -> None:
        self.log(f"skip {what}: {why}")
        self.summary.append("skipped", {"what": what, "why": why})

    def part(self, key: str, value: Any) -> None:
        parts = dict(self.summary.data.get("parts") or {})
        parts[key] = value
        self.summary.set("parts", parts)


def build_model(ctx: Ctx, name: str, layers: int | None = None):
    """A random-weight bf16 model of ``name``'s config (SDPA attention) on the device, in eval mode."""
    torch = ctx.torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg_dict = build_config_dict(load_config(name), layers=layers, shrink=ctx.shrink)
    model_type = cfg_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg_dict)
    dtype = torch.bfloat16
    torch.manual_seed(0)
    with torch.device(ctx.device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.eval()
    settle_gc()
    gc = model.generation_config
    gc.eos_token_id = None
    gc.bos_token_id = None
    gc.pad_token_id = 0
    gc.do_sample = False
    for k in ("temperature", "top_p", "top_k"):
        if hasattr(gc, k):
            setattr(gc, k, None)
    return model


def release(ctx: Ctx) -> None:
    """Collect what the caller dropped (unfreezing first: a frozen model in a reference cycle would stay) and
    hand the freed blocks back to the device."""
    import gc

    if hasattr(gc, "unfreeze"):
        gc.unfreeze()
    gc.collect()
    if ctx.cuda:
        ctx.torch.cuda.empty_cache()


def _inputs(ctx: Ctx, vocab: int, batch: int, isl: int, seed: int = 1):
    torch = ctx.torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(100, vocab - 1, (batch, isl), generator=g).to(ctx.device)
    return ids, torch.ones_like(ids)


def _generate(ctx: Ctx, model, ids, mask, n: int, cache: str, max_cache_len: int) -> float:
    """Wall seconds of one generate() call, synchronised on both sides."""
    torch = ctx.torch
    kw: dict[str, Any] = dict(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                              do_sample=False, pad_token_id=0)
    if cache == "dynamic":
        kw.update(cache_implementation="dynamic", disable_compile=True)
    elif cache == "static":
        kw.update(cache_implementation="static", max_cache_len=max_cache_len, disable_compile=True)
        model._previous_max_cache_length = -1  # the static cache would otherwise keep the longest length seen
    elif cache == "static-compile":
        kw.update(cache_implementation="static", max_cache_len=max_cache_len, disable_compile=False)
        model._previous_max_cache_length = -1
    else:
        raise ValueError(cache)
    ctx.sync()
    with quiet_gc():
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**kw)
        ctx.sync()
        dt = time.perf_counter() - t0
    got = out.shape[1] - ids.shape[1]
    if got != n:
        raise RuntimeError(f"generate returned {got} new tokens, asked {n}")
    return dt


def measure_point(ctx: Ctx, model, name: str, cache: str, batch: int, isl: int, osl: int,
                  params_b: float, note: str = "") -> dict | None:
    torch = ctx.torch
    lo, hi = ctx.plan["reps"]
    est = estimate_point_s(params_b, batch, isl, osl) * (lo + 1)
    if not ctx.budget.allows(est):
        ctx.skip(f"generate {name} {cache} b{batch} isl{isl}", f"budget: {ctx.budget.left():.0f}s left, "
                 f"point needs ~{est:.0f}s")
        return None
    vocab = int(model.config.vocab_size)
    ids, mask = _inputs(ctx, vocab, batch, isl)
    max_cache_len = isl + osl
    t_start = time.perf_counter()
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats()
    steal0 = cpu_steal_ms()
    try:
        _generate(ctx, model, ids, mask, min(4, osl), cache, max_cache_len)  # warm-up: prefill shape and decode
        t1s, tns = [_generate(ctx, model, ids, mask, 1, cache, max_cache_len)], []
        tns.append(_generate(ctx, model, ids, mask, osl, cache, max_cache_len))
        reps = reps_for(t1s[0] + tns[0], lo, hi)
        for _ in range(reps - 1):
            if not ctx.budget.allows(t1s[0] + tns[0]):
                break
            t1s.append(_generate(ctx, model, ids, mask, 1, cache, max_cache_len))
            tns.append(_generate(ctx, model, ids, mask, osl, cache, max_cache_len))
    except Exception as exc:
        ctx.error(f"generate {name} {cache} b{batch} isl{isl}", exc)
        ctx.gen.add(model=name, family=FAMILY.get(name), layers=int(model.config.num_hidden_layers), cache=cache,
                    batch=batch, isl=isl, osl=osl, status="error", notes=repr(exc)[:300])
        if ctx.cuda:
            torch.cuda.empty_cache()
        return None
    ttft, tpot = ttft_tpot(t1s, tns, osl)
    tpot_min = tpot_ms(min(t1s), min(tns), osl)
    steal1 = cpu_steal_ms()
    peak = torch.cuda.max_memory_allocated() / 2**30 if ctx.cuda else None
    row = ctx.gen.add(
        model=name, family=FAMILY.get(name), layers=int(model.config.num_hidden_layers), cache=cache, batch=batch,
        isl=isl, osl=osl, ttft_ms=ttft, tpot_ms=tpot, e2e_ms=median(tns) * 1e3,
        ttft_samples_ms=[t * 1e3 for t in t1s], e2e_samples_ms=[t * 1e3 for t in tns], reps=len(tns),
        tpot_min_ms=tpot_min, max_cache_len=max_cache_len if cache != "dynamic" else None, peak_mem_gib=peak,
        steal_ms=(steal1 - steal0) if steal0 is not None and steal1 is not None else None, status="ok",
        notes=("disable_compile=True" if cache != "static-compile" else "transformers auto-compile") +
        "; greedy; eos disabled; min_new_tokens=max_new_tokens; GC off inside timed calls"
        + (f"; {note}" if note else ""),
    )
    ctx.log(f"generate {name:13s} {cache:14s} b{batch:<3d} isl{isl:<5d} TTFT {ttft:9.2f} ms  TPOT {tpot:7.2f} ms"
            f"  ({len(tns)} reps, {time.perf_counter() - t_start:.1f}s)")
    return row


# ---- host microbenchmarks


def _loop(ctx: Ctx, fn: Callable[[], Any], n: int, reps: int = 5, warmup: int = 2) -> dict[str, float]:
    """Per-call wall (after sync), issue (before sync) and device-elapsed (CUDA events) time of ``n`` calls of
    ``fn`` back to back, µs; medians over ``reps``, after ``warmup`` calls."""
    torch = ctx.torch
    walls, issues, devs = [], [], []
    for _ in range(warmup):
        fn()
    for _ in range(reps):
        ctx.sync()
        qg = quiet_gc().__enter__()
        if ctx.cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t_issue = time.perf_counter() - t0
        if ctx.cuda:
            e1.record()
        ctx.sync()
        t_wall = time.perf_counter() - t0
        qg.__exit__(None, None, None)
        walls.append(t_wall / n * 1e6)
        issues.append(t_issue / n * 1e6)
        if ctx.cuda:
            devs.append(e0.elapsed_time(e1) * 1e3 / n)
    return {"wall_us": median(walls), "issue_us": median(issues), "device_us": median(devs) if devs else None,
            "wall_min_us": min(walls)}


def host_costs(ctx: Ctx) -> None:
    torch = ctx.torch
    F = torch.nn.functional
    n = int(ctx.plan["host_n"])
    dev = ctx.device
    x = torch.randn(1024, device=dev)
    y = torch.randn(1024, device=dev)
    a = torch.randn(16, 256, device=dev, dtype=torch.bfloat16)
    w = torch.randn(256, 256, device=dev, dtype=torch.bfloat16)
    q = torch.randn(1, 32, 1, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, 8, 128, 128, device=dev, dtype=torch.bfloat16)
    kc = torch.randn(1, 8, 128, 128, device=dev, dtype=torch.bfloat16)
    kn = torch.randn(1, 8, 1, 128, device=dev, dtype=torch.bfloat16)
    h = torch.randn(1, 1, 4096, device=dev, dtype=torch.bfloat16)
    results = {}

    def rmsnorm_eager():  # what LlamaRMSNorm does, op by op
        hs = h.to(torch.float32)
        var = hs.pow(2).mean(-1, keepdim=True)
        hs = hs * torch.rsqrt(var + 1e-5)
        return hs.to(torch.bfloat16)

    ops = [
        ("launch", "add_inplace", lambda: x.add_(1.0), "1 kernel: x.add_(1) on 1024 floats"),
        ("launch", "add_out_of_place", lambda: torch.add(x, y), "1 kernel + a caching-allocator allocation"),
        ("launch", "mul_3_chain", lambda: x.mul(y).add(y).relu(), "3 kernels; per call (divide by 3)"),
        ("launch", "linear_small", lambda: F.linear(a, w), "1 cuBLAS GEMM 16x256x256 bf16"),
        ("launch", "sdpa_decode_small", lambda: F.scaled_dot_product_attention(q, k, k, enable_gqa=True),
         "SDPA decode 1 query, 128 keys, GQA 32/8"),
        ("launch", "cat_kv_small", lambda: torch.cat([kc, kn], dim=-2), "dynamic-cache growth, 128+1 positions"),
        ("launch", "rmsnorm_eager", rmsnorm_eager, "LlamaRMSNorm body: to, pow, mean, add, rsqrt, mul, to"),
        ("dispatch", "view_transpose", lambda: h.view(1, 1, 32, 128).transpose(1, 2), "no kernel: dispatch only"),
        ("dispatch", "empty_alloc", lambda: torch.empty(1024, device=dev), "no kernel: caching allocator"),
    ]
    for fam, name, fn, note in ops:
        try:
            r = _loop(ctx, fn, n)
            results[name] = r
            ctx.host.add(family=fam, name=name, n=n, unit="us/call", notes=note, **r)
        except Exception as exc:
            ctx.error(f"host {name}", exc)

    # device time of one tiny kernel when launched from a CUDA graph (no host in the way)
    if ctx.cuda:
        try:
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    x.add_(1.0)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                for _ in range(200):
                    x.add_(1.0)
            r = _loop(ctx, g.replay, 20)
            r = {k: (v / 200 if v is not None else None) for k, v in r.items()}
            ctx.host.add(family="launch", name="add_inplace_cuda_graph", n=200 * 20, unit="us/kernel",
                         notes="200 x.add_ captured in one CUDA graph; per kernel", **r)
        except Exception as exc:
            ctx.error("host cuda graph", exc)

    # nn.Module.__call__ dispatch (no kernels)
    class Ident(torch.nn.Module):
        def forward(self, t):
            return t

    class Chain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mods = torch.nn.ModuleList([Ident() for _ in range(10)])

        def forward(self, t):
            for m in self.mods:
                t = m(t)
            return t

    def plain(t):
        return t

    ident, chain = Ident(), Chain()
    lin = torch.nn.Linear(256, 256, bias=False, device=dev, dtype=torch.bfloat16)
    nm = 20 * n
    for name, fn, note, div in (
        ("python_call", lambda: plain(h), "plain function call (baseline)", 1),
        ("module_call", lambda: ident(h), "nn.Module.__call__ of an identity forward", 1),
        ("module_call_nested10", lambda: chain(h), "per child: a module calling 10 identity children", 11),
        ("linear_module", lambda: lin(a), "nn.Linear(256,256) module (compare linear_small)", 1),
    ):
        try:
            r = _loop(ctx, fn, nm if name != "linear_module" else n)
            r = {k: (v / div if v is not None else None) for k, v in r.items()}
            ctx.host.add(family="dispatch", name=name, n=nm, unit="us/call", notes=note, **r)
            results[name] = r
        except Exception as exc:
            ctx.error(f"host {name}", exc)

    # CPU-GPU synchronisation
    if ctx.cuda:
        one = torch.ones((), device=dev)
        for name, fn, note in (
            ("item_idle", lambda: one.item(), ".item() on an idle GPU (D2H copy + sync)"),
            ("synchronize_idle", torch.cuda.synchronize, "torch.cuda.synchronize() on an idle GPU"),
            ("launch_then_item", lambda: x.add_(1.0).sum().item(), "2 kernels then .item(): a round trip"),
            ("bool_max_eq0", lambda: bool(x.max() == 0), "generate's stop check: bool(unfinished.max() == 0)"),
        ):
            try:
                r = _loop(ctx, fn, max(200, n // 4))
                ctx.host.add(family="sync", name=name, n=max(200, n // 4), unit="us/call", notes=note, **r)
                results[name] = r
            except Exception as exc:
                ctx.error(f"host {name}", exc)
    ctx.part("host", results)


def cache_update_costs(ctx: Ctx) -> None:
    """Per layer (keys and values): DynamicLayer.update (two torch.cat of the whole cache) against
    StaticLayer.update (arange, add_, two index_copy_), at Llama-3.1-8B's KV shape (8 KV heads x 128)."""
    torch = ctx.torch
    dev = ctx.device
    kvh, hd = (2, 16) if ctx.shrink else (8, 128)
    out = {}
    for batch, ctxlen in ctx.plan["cache_points"]:
        if not ctx.budget.allows(3):
            ctx.skip(f"cache b{batch} ctx{ctxlen}", "budget")
            break
        try:
            kc = torch.randn(batch, kvh, ctxlen, hd, device=dev, dtype=torch.bfloat16)
            vc = torch.randn_like(kc)
            kn = torch.randn(batch, kvh, 1, hd, device=dev, dtype=torch.bfloat16)
            vn = torch.randn_like(kn)
            ks = torch.zeros(batch, kvh, ctxlen + 64, hd, device=dev, dtype=torch.bfloat16)
            vs = torch.zeros_like(ks)
            cum = torch.tensor([ctxlen], device=dev)

            def dyn():
                return torch.cat([kc, kn], dim=-2), torch.cat([vc, vn], dim=-2)

            def stat():
                pos = torch.arange(1, device=dev) + cum
                cum.add_(0)
                ks.index_copy_(2, pos, kn)
                vs.index_copy_(2, pos, vn)

            nrep = 50
            for name, fn, note in (("dynamic_cat", dyn, "2 x torch.cat of the whole layer cache + 1 token"),
                                   ("static_index_copy", stat, "arange + add_ + 2 x index_copy_ of 1 token")):
                r = _loop(ctx, fn, nrep, reps=3)
                ctx.host.add(family="cache_update", name=name, batch=batch, ctx=ctxlen, n=nrep, unit="us/layer",
                             notes=note + f"; KV {kvh}x{hd} bf16; bytes moved by cat "
                             f"{2 * 2 * batch * kvh * (ctxlen + 1) * hd * 2 / 1e6:.1f} MB", **r)
                out[f"{name}|b{batch}|ctx{ctxlen}"] = r
            del kc, vc, ks, vs
        except Exception as exc:
            ctx.error(f"cache b{batch} ctx{ctxlen}", exc)
    ctx.part("cache_update", out)


# ---- profiler


def _profile(ctx: Ctx, fn: Callable[[], Any]) -> tuple[list[dict], dict[str, Any]]:
    """Run ``fn`` under torch.profiler; (device events [{name, ts, dur, cat}], counts of host-side events)."""
    torch = ctx.torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if ctx.cuda else [])
    ctx.sync()
    with profile(activities=acts, record_shapes=False, with_stack=False) as prof:
        t0 = time.perf_counter()
        fn()
        ctx.sync()
        wall = time.perf_counter() - t0
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path, encoding="utf-8") as fh:
            trace = json.load(fh)
    finally:
        os.unlink(path)
    events = trace.get("traceEvents", trace) if isinstance(trace, dict) else trace
    dev, ops = [], []
    host = {"cpu_op": 0, "launch": 0, "memcpy_api": 0, "sync_api": 0, "wall_us": wall * 1e6}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        name = str(e.get("name", ""))
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            dev.append({"name": name, "ts": float(e.get("ts", 0)), "dur": float(e.get("dur", 0)), "cat": cat})
        elif cat == "cpu_op":
            host["cpu_op"] += 1
            ops.append((e.get("tid"), float(e.get("ts", 0)), float(e.get("dur", 0))))
        elif cat in ("cuda_runtime", "cuda_driver"):
            low = name.lower()
            if "launch" in low:
                host["launch"] += 1
            elif "memcpy" in low or "memset" in low:
                host["memcpy_api"] += 1
            elif "synchronize" in low:
                host["sync_api"] += 1
    host["cpu_op_top"] = top_level_count(ops)
    return dev, host


def top_level_count(ops: Iterable[tuple[Any, float, float]]) -> int:
    """Operator events (thread, start, duration) not nested inside another one of the same thread: the aten
    calls Python made, not the ones they made in turn."""
    n = 0
    ends: dict[Any, float] = {}
    for tid, ts, dur in sorted(ops, key=lambda o: (str(o[0]), o[1], -o[2])):
        if ts >= ends.get(tid, float("-inf")):
            n += 1
            ends[tid] = ts + dur
        else:
            ends[tid] = max(ends[tid], ts + dur) if ts + dur > ends[tid] else ends[tid]
    return n


def _summarise(dev: list[dict]) -> dict[str, Any]:
    by: dict[str, list] = {}
    for e in dev:
        key = e["name"] if e["cat"] == "kernel" else e["cat"]
        by.setdefault(key, [0, 0.0])
        by[key][0] += 1
        by[key][1] += e["dur"]
    return {"kernels": sum(1 for e in dev if e["cat"] == "kernel"),
            "memcpy": sum(1 for e in dev if e["cat"] == "gpu_memcpy"),
            "memset": sum(1 for e in dev if e["cat"] == "gpu_memset"),
            "busy_us": busy_time_us((e["ts"], e["ts"] + e["dur"]) for e in dev),
            "sum_us": sum(e["dur"] for e in dev), "by_name": by}


def _diff_rows(a: dict, b: dict, per: float) -> dict[str, tuple[float, float]]:
    """(count, device µs) per unit of ``per``: b minus a, by kernel name."""
    names = set(a["by_name"]) | set(b["by_name"])
    out = {}
    for n in names:
        ca, ta = a["by_name"].get(n, [0, 0.0])
        cb, tb = b["by_name"].get(n, [0, 0.0])
        if cb - ca != 0 or abs(tb - ta) > 0:
            out[n] = ((cb - ca) / per, (tb - ta) / per)
    return out


def _kernel_rows(ctx: Ctx, model: str, cache: str, phase: str, batch: int, ctxlen: int,
                 table: dict[str, tuple[float, float]]) -> None:
    rows = []
    for name, (count, us) in sorted(table.items(), key=lambda kv: -kv[1][0]):
        if abs(count) < 1e-9:
            continue
        rows.append({"model": model, "cache": cache, "phase": phase, "batch": batch, "ctx": ctxlen,
                     "category": kernel_category(name), "kernel": short_kernel_name(name),
                     "count": round(count, 3), "device_us": us})
    ctx.kern.extend(rows)


def _cats(table: dict[str, tuple[float, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, (count, _) in table.items():
        out[kernel_category(name)] = out.get(kernel_category(name), 0) + count
    return {k: round(v, 3) for k, v in sorted(out.items())}


def profile_generate(ctx: Ctx, model, name: str, cache: str, batch: int, isl: int,
                     max_cache_len: int | None = None) -> dict | None:
    """Kernels of the prefill (generate(1)) and of one decode step ((generate(1+K) - generate(1)) / K).
    ``max_cache_len``: the static cache's length (default isl + K + 1; the compiled path passes the length it
    was compiled for, a new one would recompile)."""
    steps = int(ctx.plan["profile_steps"])
    ids, mask = _inputs(ctx, int(model.config.vocab_size), batch, isl)
    mcl = max_cache_len or isl + steps + 1
    _generate(ctx, model, ids, mask, 1 + steps, cache, mcl)  # warm
    d1, h1 = _profile(ctx, lambda: _generate(ctx, model, ids, mask, 1, cache, mcl))
    dk, hk = _profile(ctx, lambda: _generate(ctx, model, ids, mask, 1 + steps, cache, mcl))
    s1, sk = _summarise(d1), _summarise(dk)
    per_step = _diff_rows(s1, sk, steps)
    prefill = {n: (c, t) for n, (c, t) in ((n, tuple(v)) for n, v in s1["by_name"].items())}
    _kernel_rows(ctx, name, cache, "prefill+first_token", batch, isl, prefill)
    _kernel_rows(ctx, name, cache, "decode_step", batch, isl, per_step)
    res = {
        "prefill": {"kernels": s1["kernels"], "memcpy": s1["memcpy"], "memset": s1["memset"],
                    "busy_ms": s1["busy_us"] / 1e3, "wall_profiled_ms": h1["wall_us"] / 1e3,
                    "launch_api": h1["launch"], "cpu_ops": h1["cpu_op"], "cpu_ops_top": h1["cpu_op_top"],
                    "categories": _cats(prefill)},
        "decode_step": {
            "kernels": (sk["kernels"] - s1["kernels"]) / steps, "memcpy": (sk["memcpy"] - s1["memcpy"]) / steps,
            "memset": (sk["memset"] - s1["memset"]) / steps,
            "busy_ms": (sk["busy_us"] - s1["busy_us"]) / steps / 1e3,
            "wall_profiled_ms": (hk["wall_us"] - h1["wall_us"]) / steps / 1e3,
            "launch_api": (hk["launch"] - h1["launch"]) / steps, "cpu_ops": (hk["cpu_op"] - h1["cpu_op"]) / steps,
            "cpu_ops_top": (hk["cpu_op_top"] - h1["cpu_op_top"]) / steps,
            "memcpy_api": (hk["memcpy_api"] - h1["memcpy_api"]) / steps,
            "sync_api": (hk["sync_api"] - h1["sync_api"]) / steps, "categories": _cats(per_step)},
        "layers": int(model.config.num_hidden_layers), "steps": steps,
    }
    tp = _find_tpot(ctx, name, cache, batch, isl)
    if tp:
        res["decode_step"]["tpot_unprofiled_ms"] = tp
        res["decode_step"]["busy_fraction"] = res["decode_step"]["busy_ms"] / tp
    ctx.log(f"profile {name} {cache} b{batch} isl{isl}: prefill {s1['kernels']} kernels; decode step "
            f"{res['decode_step']['kernels']:.1f} kernels, busy {res['decode_step']['busy_ms']:.2f} ms"
            + (f" of TPOT {tp:.2f} ms" if tp else ""))
    return res


def _find_tpot(ctx: Ctx, name: str, cache: str, batch: int, isl: int) -> float | None:
    for r in ctx.gen.rows:
        if (r["model"], r["cache"], r["batch"], r["isl"], r["status"]) == (name, cache, batch, isl, "ok"):
            return r["tpot_ms"]
    return None


# ---- per-layer scaling and decode decomposition


def _manual_decode(ctx: Ctx, model, batch: int, isl: int, steps: int, sync_each: bool) -> dict[str, float]:
    """A greedy decode loop like generate's, without generate: forward (with a growing attention mask and the
    dynamic cache), argmax; ``sync_each`` adds generate's per-step stop check (bool(max == 0))."""
    torch = ctx.torch
    from transformers import DynamicCache

    ids, mask = _inputs(ctx, int(model.config.vocab_size), batch, isl)
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        out = model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True, logits_to_keep=1)
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
        one = torch.ones((batch, 1), dtype=mask.dtype, device=mask.device)
        unfinished = torch.ones(batch, dtype=torch.long, device=mask.device)

        def step():
            nonlocal tok, mask
            mask = torch.cat([mask, one], dim=-1)
            o = model(input_ids=tok, attention_mask=mask, past_key_values=cache, use_cache=True)
            tok = o.logits[:, -1].float().argmax(-1, keepdim=True)
            if sync_each:
                bool(unfinished.max() == 0)

        r = _loop(ctx, step, steps, reps=1, warmup=3)
    return {"wall_ms": r["wall_us"] / 1e3, "issue_ms": r["issue_us"] / 1e3,
            "device_elapsed_ms": r["device_us"] / 1e3 if r["device_us"] is not None else None}


def _count_modules(ctx: Ctx, model, batch: int, isl: int) -> int:
    """nn.Module calls in one decode forward (a global forward pre-hook counts them)."""
    torch = ctx.torch
    from transformers import DynamicCache

    ids, mask = _inputs(ctx, int(model.config.vocab_size), batch, isl)
    calls = [0]

    def hook(mod, args):
        calls[0] += 1

    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True, logits_to_keep=1)
        mask = torch.cat([mask, mask[:, :1]], dim=-1)
        h = torch.nn.modules.module.register_module_forward_pre_hook(hook)
        try:
            model(input_ids=ids[:, :1], attention_mask=mask, past_key_values=cache, use_cache=True)
        finally:
            h.remove()
    return calls[0]


def _profile_forward(ctx: Ctx, model, batch: int, isl: int, phase: str) -> dict:
    torch = ctx.torch
    from transformers import DynamicCache

    ids, mask = _inputs(ctx, int(model.config.vocab_size), batch, isl)
    with torch.inference_mode():
        def prefill():
            c = DynamicCache(config=model.config)
            return c, model(input_ids=ids, attention_mask=mask, past_key_values=c, use_cache=True, logits_to_keep=1)

        if phase == "prefill":
            prefill()
            dev, host = _profile(ctx, prefill)
        else:
            cache, out = prefill()
            tok = out.logits[:, -1].argmax(-1, keepdim=True)
            m2 = torch.cat([mask, mask[:, :1]], dim=-1)

            def dec():  # one decode step at context isl; the token it adds is cropped again (a view, no kernel)
                o = model(input_ids=tok, attention_mask=m2, past_key_values=cache, use_cache=True)
                cache.crop(-1)
                return o

            dec()
            dev, host = _profile(ctx, dec)
    s = _summarise(dev)
    s["host"] = host
    return s


def _layer_points(ctx: Ctx, name: str) -> list[tuple[int, int]]:
    lp = ctx.plan["layer_points"]
    return list(lp.get(name, lp.get("*", [])))


def _median_runs(runs: list[dict[str, float]]) -> dict[str, float]:
    out = {k: median(r[k] for r in runs) for k in runs[0]}
    out["wall_min_ms"] = min(r["wall_ms"] for r in runs)
    out["wall_samples_ms"] = [r["wall_ms"] for r in runs]
    return out


def layer_scaling(ctx: Ctx, name: str) -> None:
    """A 2-layer and a 4-layer model of ``name``, held together and measured alternately (3 rounds, medians):
    per decoder layer host time, kernels and modules by difference."""
    res: dict[str, Any] = {}
    if not ctx.budget.allows(25):
        ctx.skip(f"layers {name}", "budget")
        return
    models = {}
    try:
        for L in (2, 4):
            models[L] = build_model(ctx, name, layers=L)
    except Exception as exc:
        ctx.error(f"layers {name} build", exc)
        models.clear()
        release(ctx)
        return
    summaries: dict[int, dict] = {L: {} for L in models}
    try:
        for L, model in models.items():
            summaries[L]["modules"] = _count_modules(ctx, model, 1, 16)
        for batch, isl in _layer_points(ctx, name):
            runs: dict[tuple, list] = {}
            for _ in range(3):
                for sync_each in (False, True):
                    for L, model in models.items():
                        runs.setdefault((L, sync_each), []).append(
                            _manual_decode(ctx, model, batch, isl, 30, sync_each))
            for (L, sync_each), rr in runs.items():
                summaries[L][f"decode|b{batch}|ctx{isl}|sync{int(sync_each)}"] = _median_runs(rr)
            for L, model in models.items():
                for phase in ("decode", "prefill"):
                    summaries[L][f"{phase}|b{batch}|ctx{isl}"] = _profile_forward(ctx, model, batch, isl, phase)
    except Exception as exc:
        ctx.error(f"layers {name}", exc)
        models.clear()
        release(ctx)
        return
    models.clear()
    release(ctx)
    s2, s4 = summaries[2], summaries[4]
    res["modules_per_layer"] = (s4["modules"] - s2["modules"]) / 2
    res["modules_outside_layers"] = s2["modules"] - 2 * res["modules_per_layer"]
    for batch, isl in _layer_points(ctx, name):
        for sync_each in (0, 1):
            key = f"decode|b{batch}|ctx{isl}|sync{sync_each}"
            if key not in s2 or key not in s4:
                continue
            a, b = s2[key], s4[key]
            per_layer = (b["wall_ms"] - a["wall_ms"]) / 2
            outside = a["wall_ms"] - 2 * per_layer
            res[key] = {"per_layer_ms": per_layer, "outside_layers_ms": outside, "L2": a, "L4": b}
            ctx.host.add(family="layer", name=f"decode_forward_per_layer{'_sync' if sync_each else ''}",
                         model=name, batch=batch, ctx=isl, layers="4-2", wall_us=per_layer * 1e3,
                         issue_us=(b["issue_ms"] - a["issue_ms"]) / 2 * 1e3,
                         device_us=((b["device_elapsed_ms"] - a["device_elapsed_ms"]) / 2 * 1e3
                                    if a["device_elapsed_ms"] is not None else None),
                         wall_min_us=(b["wall_min_ms"] - a["wall_min_ms"]) / 2 * 1e3, n=30, unit="us/layer",
                         notes="(4-layer - 2-layer) decode forward loop / 2, medians of 3 alternating rounds; "
                               "wall = max(host, device) per layer; wall_min from the fastest rounds")
            ctx.host.add(family="layer", name=f"decode_forward_outside_layers{'_sync' if sync_each else ''}",
                         model=name, batch=batch, ctx=isl, layers="2", wall_us=outside * 1e3,
                         wall_min_us=(a["wall_min_ms"] - (b["wall_min_ms"] - a["wall_min_ms"])) * 1e3,
                         n=30, unit="us/step",
                         notes="embedding, mask, rotary, final norm, LM head, argmax, mask cat: 2-layer minus 2 layers")
        for phase in ("decode", "prefill"):
            a, b = s2[f"{phase}|b{batch}|ctx{isl}"], s4[f"{phase}|b{batch}|ctx{isl}"]
            table = _diff_rows(a, b, 2)
            _kernel_rows(ctx, name, "dynamic", f"layer_{phase}", batch, isl, table)
            outside = {n: (c2 - 2 * table.get(n, (0, 0))[0], t2 - 2 * table.get(n, (0, 0))[1])
                       for n, (c2, t2) in a["by_name"].items()}
            _kernel_rows(ctx, name, "dynamic", f"outside_layers_{phase}", batch, isl, outside)
            res[f"kernels|{phase}|b{batch}|ctx{isl}"] = {
                "per_layer": (b["kernels"] - a["kernels"]) / 2,
                "memcpy_per_layer": (b["memcpy"] - a["memcpy"]) / 2,
                "outside_layers": a["kernels"] - (b["kernels"] - a["kernels"]),
                "busy_us_per_layer": (b["busy_us"] - a["busy_us"]) / 2,
                "busy_us_outside_layers": a["busy_us"] - (b["busy_us"] - a["busy_us"]),
                "launch_api_per_layer": (b["host"]["launch"] - a["host"]["launch"]) / 2,
                "cpu_ops_per_layer": (b["host"]["cpu_op"] - a["host"]["cpu_op"]) / 2,
                "cpu_ops_top_per_layer": (b["host"]["cpu_op_top"] - a["host"]["cpu_op_top"]) / 2,
                "cpu_ops_top_outside_layers": a["host"]["cpu_op_top"] - (b["host"]["cpu_op_top"]
                                                                         - a["host"]["cpu_op_top"]),
                "categories_per_layer": _cats(table),
            }
    ctx.part(f"layers|{name}", res)
    k = res.get(f"kernels|decode|b1|ctx{_layer_points(ctx, name)[0][1]}", {})
    d = res.get(f"decode|b1|ctx{_layer_points(ctx, name)[0][1]}|sync1", {})
    ctx.log(f"layers {name}: {k.get('per_layer')} kernels/layer (decode), {res['modules_per_layer']} modules/layer, "
            f"{(d.get('per_layer_ms') or 0) * 1e3:.0f} us/layer decode (forward+sync loop)")


def decompose(ctx: Ctx, model, name: str) -> None:
    """Decode step: forward + argmax with no sync; with one sync a step; generate's TPOT (same batch, isl)."""
    out = {}
    for batch, isl in ctx.plan["decompose"]:
        if not ctx.budget.allows(10):
            ctx.skip(f"decompose {name} b{batch} isl{isl}", "budget")
            break
        try:
            runs0, runs1 = [], []
            for _ in range(3):  # alternating, medians: the host's speed drifts
                runs0.append(_manual_decode(ctx, model, batch, isl, 20, False))
                runs1.append(_manual_decode(ctx, model, batch, isl, 20, True))
            r0, r1 = _median_runs(runs0), _median_runs(runs1)
        except Exception as exc:
            ctx.error(f"decompose {name} b{batch} isl{isl}", exc)
            continue
        tp = _find_tpot(ctx, name, "dynamic", batch, isl)
        rec = {"forward_nosync": r0, "forward_sync": r1, "generate_tpot_ms": tp,
               "outside_forward_ms": (tp - r1["wall_ms"]) if tp else None}
        out[f"b{batch}|isl{isl}"] = rec
        for key, r, note in (("decode_forward_nosync", r0, "forward + argmax, 20 steps, no sync: max(host, device)"),
                             ("decode_forward_sync", r1, "forward + argmax + bool(max==0) each step")):
            ctx.host.add(family="decode_step", name=key, model=name, batch=batch, ctx=isl,
                         layers=int(model.config.num_hidden_layers), wall_us=r["wall_ms"] * 1e3,
                         issue_us=r["issue_ms"] * 1e3,
                         device_us=r["device_elapsed_ms"] * 1e3 if r["device_elapsed_ms"] is not None else None,
                         wall_min_us=r["wall_min_ms"] * 1e3, n=20, unit="us/step",
                         notes=note + "; dynamic cache, context isl+3..isl+23; median of 3 alternating rounds")
        if tp:
            ctx.host.add(family="decode_step", name="generate_outside_forward", model=name, batch=batch, ctx=isl,
                         layers=int(model.config.num_hidden_layers), wall_us=(tp - r1["wall_ms"]) * 1e3,
                         n=1, unit="us/step",
                         notes="generate TPOT (dynamic, context isl..isl+63) minus forward+sync step: "
                               "prepare_inputs, logits copy to fp32, processors, stopping criteria, kwargs update")
        ctx.log(f"decompose {name} b{batch} isl{isl}: fwd nosync {r0['wall_ms']:.2f} ms, fwd+sync "
                f"{r1['wall_ms']:.2f} ms, generate TPOT {tp if tp else float('nan'):.2f} ms")
    ctx.part(f"decompose|{name}", out)


# ---- a request's setup


def request_setup(ctx: Ctx, model, name: str, batch: int = 1, isl: int = 128, rounds: int = 31) -> None:
    """generate()'s own work per call: generate(max_new_tokens=1) against the same prefill run by hand
    (forward with a fresh cache, argmax, the token copied to the host), alternating, medians of the
    differences; with the bare launch measured beside it, so that the setup carries to another host as a
    multiple of its launch cost."""
    torch = ctx.torch
    ids, mask = _inputs(ctx, int(model.config.vocab_size), batch, isl)

    def by_hand() -> float:
        ctx.sync()
        with quiet_gc():
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = model(input_ids=ids, attention_mask=mask, use_cache=True)
                out.logits[:, -1, :].argmax(-1).cpu()
            ctx.sync()
            return time.perf_counter() - t0

    for _ in range(2):
        _generate(ctx, model, ids, mask, 1, "dynamic", isl + 1)
        by_hand()
    diffs, gens, hands = [], [], []
    for _ in range(rounds):
        g = _generate(ctx, model, ids, mask, 1, "dynamic", isl + 1)
        h = by_hand()
        gens.append(g)
        hands.append(h)
        diffs.append(g - h)
    x = torch.randn(1024, device=ctx.device)
    launch = _loop(ctx, lambda: x.add_(1.0), int(ctx.plan["host_n"]))
    ctx.host.add(family="request", name="generate_setup", model=name, batch=batch, ctx=isl,
                 layers=int(model.config.num_hidden_layers), wall_us=median(diffs) * 1e6,
                 wall_min_us=min(diffs) * 1e6, n=rounds, unit="us/request",
                 notes=f"generate(max_new_tokens=1) {median(gens) * 1e3:.2f} ms minus forward(use_cache=True) + "
                       f"argmax + copy {median(hands) * 1e3:.2f} ms, dynamic cache, alternating, GC off")
    ctx.host.add(family="launch", name="add_inplace", model=name, wall_us=launch["wall_us"],
                 issue_us=launch["issue_us"], device_us=launch["device_us"], wall_min_us=launch["wall_min_us"],
                 n=int(ctx.plan["host_n"]), unit="us/call", notes="beside the request setup: 1 kernel, x.add_(1)")
    ctx.log(f"request setup {name}: {median(diffs) * 1e3:.2f} ms (generate {median(gens) * 1e3:.2f}, by hand "
            f"{median(hands) * 1e3:.2f}); bare launch {launch['wall_us']:.2f} us")


# ---- compile (child process)


def compile_child(ctx: Ctx, name: str, points: list[tuple[int, int]]) -> None:
    """transformers' compiled static-cache path at each point, then the kernels of its prefill and decode step."""
    model = build_model(ctx, name)
    params_b = sum(p.numel() for p in model.parameters()) / 1e9
    for batch, isl in points:
        if not ctx.budget.allows(60):
            ctx.skip(f"compile {name} b{batch} isl{isl}", f"budget: {ctx.budget.left():.0f}s left")
            continue
        t0 = time.perf_counter()
        ids, mask = _inputs(ctx, int(model.config.vocab_size), batch, isl)
        try:
            _generate(ctx, model, ids, mask, 4, "static-compile", isl + ctx.plan["osl"])  # compiles
        except Exception as exc:
            ctx.error(f"compile {name} b{batch} isl{isl}", exc)
            ctx.gen.add(model=name, family=FAMILY.get(name), layers=int(model.config.num_hidden_layers),
                        cache="static-compile", batch=batch, isl=isl, osl=ctx.plan["osl"], status="error",
                        notes=repr(exc)[:300])
            return
        first = time.perf_counter() - t0
        compiled = getattr(model, "_compiled_call", None) is not None
        ctx.log(f"compile {name} b{batch} isl{isl}: first call {first:.1f}s; compiled forward: {compiled}")
        measure_point(ctx, model, name, "static-compile", batch, isl, ctx.plan["osl"], params_b,
                      note=f"first call (compile) {first:.0f}s; compiled forward present: {compiled}")
        if ctx.budget.allows(20):
            try:
                r = profile_generate(ctx, model, name, "static-compile", batch, isl,
                                     max_cache_len=isl + ctx.plan["osl"])
                ctx.part(f"profile|{name}|static-compile|b{batch}|isl{isl}", r)
            except Exception as exc:
                ctx.error(f"profile {name} static-compile b{batch} isl{isl}", exc)


def _merge_child(ctx: Ctx, sub: Path) -> int:
    """Copy a compile child's rows, parts and errors into the parent's tables; the number of generate rows."""
    n = 0
    for table, fname, columns in ((ctx.gen, "generate.csv", GENERATE_COLUMNS),
                                  (ctx.kern, "kernels.csv", KERNEL_COLUMNS)):
        p = sub / fname
        if not p.is_file():
            continue
        with open(p, encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        table.extend({k: (v if v != "" else None) for k, v in row.items() if k in columns} for row in rows)
        if fname == "generate.csv":
            n = sum(1 for r in rows if r.get("status") == "ok")
    doc = sub / "summary.json"
    if doc.is_file():
        try:
            d = json.loads(doc.read_text())
        except ValueError:
            d = {}
        for e in d.get("errors", []):
            ctx.summary.append("errors", {**e, "where": "compile child: " + e.get("where", "")})
        for k, v in (d.get("parts") or {}).items():
            ctx.part(k, v)
    return n


def run_compile(ctx: Ctx, argv_base: list[str]) -> None:
    """Each model of the plan's ``compile`` points in a child process (a fresh torch.compile state, killed at
    its share of the budget), merged into this run's tables."""
    import subprocess

    models: dict[str, list[tuple[int, int]]] = {}
    for name, batch, isl in ctx.plan["compile"]:
        models.setdefault(name, []).append((batch, isl))
    for i, (name, pts) in enumerate(models.items()):
        left = ctx.budget.left() - ctx.budget.reserve_s
        share = left / (len(models) - i)
        if share < 60:
            ctx.skip(f"static-compile {name}", f"budget: {left:.0f}s left, compile needs ~60s or more")
            continue
        sub = ctx.out / f"compile-{name}"
        cmd = _self_command() + ["--out", str(sub), "--compile-child", name, "--budget-s", str(int(share - 5)),
                                 "--points", ";".join(f"{b},{s_}" for b, s_ in pts)] + argv_base
        ctx.log(f"compile child: {' '.join(cmd)}")
        try:
            r = subprocess.run(cmd, timeout=share, capture_output=True, text=True, cwd=str(ROOT))
            ctx.log("compile child output tail:\n" + (r.stdout + r.stderr)[-3000:])
            status = f"exit {r.returncode}"
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            ctx.log("compile child killed at its budget; tail:\n" + out[-2000:])
            status = "killed at its budget"
        n = _merge_child(ctx, sub)
        if not n:
            ctx.skip(f"static-compile {name}", f"child {status}; no point measured (see log)")
        ctx.part(f"compile|{name}", {"status": status, "points": n})
        # keep only the merged tables in --out (the device returns at most 8 files)
        for f in sorted(sub.glob("*")) if sub.is_dir() else []:
            try:
                f.unlink()
            except OSError:
                pass
        try:
            sub.rmdir()
        except OSError:
            pass


# ---- main


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    budget = Budget(args.budget_s)
    p = plan(args.quick)
    if args.models:
        keep = [m.strip() for m in args.models.split(",") if m.strip()]
        p["grid"] = [(m, pts) for m, pts in p["grid"] if m in keep]
        p["layer_models"] = [m for m in p["layer_models"] if m in keep]
        p["compile"] = [c for c in p["compile"] if c[0] in keep]
        p["models"] = [m for m in p["models"] if m in keep]
    import torch

    try:
        import transformers
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except Exception as exc:
        print(f"transformers does not import: {exc!r}", file=sys.stderr)
        raise
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device (pass --device cpu for a functional check)")
    torch.backends.cuda.matmul.allow_tf32 = False
    ctx = Ctx(out, p, budget, device, args.shrink)
    if args.compile_child:
        pts = [tuple(int(x) for x in s.split(",")) for s in args.points.split(";") if s]
        compile_child(ctx, args.compile_child, pts)
        return 0
    atomic_write_text(out / "environment.json", json.dumps(_json_safe(environment()), indent=1) + "\n")
    ctx.log(f"torch {torch.__version__}, transformers {transformers.__version__}, device {device}, "
            f"budget {args.budget_s:.0f}s, plan {'quick' if args.quick else 'full'}")

    def guarded(label: str, fn: Callable[[], Any]) -> None:
        try:
            fn()
        except Exception as exc:
            ctx.error(label, exc)

    if args.request_only:
        for name in p["models"]:
            if not budget.allows(30):
                ctx.skip(f"request setup {name}", "budget")
                continue
            try:
                model = build_model(ctx, name)
                request_setup(ctx, model, name)
            except Exception as exc:
                ctx.error(f"request setup {name}", exc)
            model = None
            release(ctx)
        return 0
    if args.compile_only:
        p["grid"], p["layer_models"] = [], []
    else:
        guarded("host costs", lambda: host_costs(ctx))
        guarded("cache update", lambda: cache_update_costs(ctx))
    for name, pts in p["grid"]:
        if not budget.allows(20):
            ctx.skip(f"model {name}", "budget")
            continue
        try:
            t0 = time.perf_counter()
            model = build_model(ctx, name)
            params_b = sum(x.numel() for x in model.parameters()) / 1e9
            ctx.log(f"built {name}: {params_b:.2f} B parameters in {time.perf_counter() - t0:.1f}s")
        except Exception as exc:
            ctx.error(f"build {name}", exc)
            continue
        for cache, batch, isl in pts:
            measure_point(ctx, model, name, cache, batch, isl, p["osl"], params_b)
        guarded(f"decompose {name}", lambda: decompose(ctx, model, name))
        for batch, isl in p["profile"]:
            for cache in ("dynamic", "static"):
                if not budget.allows(15):
                    ctx.skip(f"profile {name} {cache} b{batch} isl{isl}", "budget")
                    continue
                try:
                    r = profile_generate(ctx, model, name, cache, batch, isl)
                    ctx.part(f"profile|{name}|{cache}|b{batch}|isl{isl}", r)
                except Exception as exc:
                    ctx.error(f"profile {name} {cache} b{batch} isl{isl}", exc)
        del model
        release(ctx)
        if name in p["layer_models"]:
            guarded(f"layers {name}", lambda: layer_scaling(ctx, name))
    for name in p["layer_models"]:
        if name not in [m for m, _ in p["grid"]]:
            guarded(f"layers {name}", lambda: layer_scaling(ctx, name))
    if p["compile"] and not args.no_compile:
        extra = (["--quick"] if args.quick else []) + (["--device", device]) + (["--shrink"] if args.shrink else [])
        guarded("compile", lambda: run_compile(ctx, extra))
    ctx.summary.set("finished_at_s", budget.elapsed())
    try:
        end = environment()
        ctx.summary.set("environment_at_end", {k: end.get(k) for k in ("nvidia_smi", "cpu")})
    except Exception as exc:
        ctx.error("environment at end", exc)
    ctx.log(f"done in {budget.elapsed():.0f}s: {len(ctx.gen.rows)} generate rows, {len(ctx.host.rows)} host rows, "
            f"{len(ctx.kern.rows)} kernel rows, {len(ctx.summary.data['errors'])} errors, "
            f"{len(ctx.summary.data['skipped'])} skipped")
    _print_table(ctx)
    return 0


def _print_table(ctx: Ctx) -> None:
    print("\nmodel          cache           b    isl    TTFT ms   TPOT ms")
    for r in ctx.gen.rows:
        if r["status"] == "ok":
            print(f"{r['model']:14s} {r['cache']:14s} {int(r['batch']):3d} {int(r['isl']):6d} "
                  f"{float(r['ttft_ms']):10.2f} {float(r['tpot_ms']):9.2f}")
    print("\nhost:")
    for r in ctx.host.rows:
        if r["family"] in ("launch", "dispatch", "sync"):
            print(f"  {r['name']:24s} wall {r['wall_us'] or 0:8.2f} us  issue {r['issue_us'] or 0:8.2f} us  "
                  f"device {r['device_us'] or 0:8.2f} us")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.measure.hf_generate", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory for the CSV/JSON results")
    ap.add_argument("--quick", action="store_true", help="a one-minute smoke run (Llama-3.2-1B, batch 1, N 16)")
    ap.add_argument("--budget-s", type=float, default=470.0, help="stop starting new parts after this many seconds")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--models", default="", help="comma-separated subset of " + ",".join(MODELS))
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile (static-compile) points")
    ap.add_argument("--request-only", action="store_true",
                    help="only generate()'s per-request setup (batch 1, 128 tokens) and the bare launch, per model")
    ap.add_argument("--compile-only", action="store_true",
                    help="only the torch.compile (static-compile) points and their kernels")
    ap.add_argument("--shrink", action="store_true", help="tiny widths (functional test on CPU)")
    ap.add_argument("--compile-child", default="", help=argparse.SUPPRESS)
    ap.add_argument("--points", default="", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def _script_path_guard() -> None:
    """Run as a script, Python puts this file's folder first on sys.path, where ``kernels.py`` would shadow the
    ``kernels`` package transformers probes for: take that folder off."""
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]


def _self_command() -> list[str]:
    if __package__:
        return [sys.executable, "-m", f"{__package__}.hf_generate"]
    return [sys.executable, str(Path(__file__).resolve())]


def main(argv: list[str] | None = None) -> int:
    _script_path_guard()
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
