"""What a Hugging Face ``generate()`` run measures and how long it may take: the models' configs, the plan, the
budget, and the arithmetic of TTFT and TPOT from two generate() timings. Pure Python (no torch, no transformers):
tests/test_hf_generate.py runs it anywhere.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterable

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "calibration" / "hf" / "configs"
MODELS = ("llama-3.1-8b", "llama-3.2-1b", "qwen3-8b")
FAMILY = {"llama-3.1-8b": "llama", "llama-3.2-1b": "llama", "qwen3-8b": "qwen3"}
# keys of the ``Llama/Qwen config.json`` that only describe a checkpoint's files or training, never the compute
_DROP_KEYS = ("transformers_version", "_name_or_path", "quantization_config", "auto_map", "torch_dtype",
              "dtype", "architectures")


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
