"""The torch side of a Hugging Face ``generate()`` run: the model built from its config, generate() timed whole,
its kernels profiled, the decode step decomposed and scaled per decoder layer, the compiled path in a child.

Models are built from a config dict with random weights (``AutoModelForCausalLM.from_config``, bf16,
``attn_implementation="sdpa"``): nothing is downloaded. Each figure becomes a row of the run's
:class:`~perfmodel.measure.hf_rows.Record` as it is measured; timing goes through :mod:`perfmodel.measure.timing`
(GC off inside timed calls, :func:`~perfmodel.measure.timing.host_loop` for back-to-back calls).
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Any, Callable

import torch

from .environment import Environment, cpu_steal_ms
from .hf_plan import (FAMILY, Budget, build_config_dict, estimate_point_s, load_config, median, reps_for, tpot_ms,
                      ttft_tpot)
from .hf_rows import Record, generate_id
from .hf_trace import categories, condense, diff_rows, kernel_category, short_kernel_name, summarise
from .timing import host_loop, quiet_gc, settle_gc


class Ctx:
    """Everything a measurement needs: the device, the run's record, its budget and plan, the environment."""

    def __init__(self, rec: Record, plan: dict, budget: Budget, device: str, shrink: bool, env: Environment):
        self.rec, self.plan, self.budget, self.device, self.shrink, self.env = rec, plan, budget, device, shrink, env
        self.out = rec.out
        self.gen, self.host, self.kern = (rec.table_of(t) for t in ("generate", "host", "kernels"))
        self.cuda = device.startswith("cuda")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def log(self, msg: str) -> None:
        print(f"[{self.budget.elapsed():7.1f}s] {msg}", flush=True)

    def error(self, where: str, exc: BaseException) -> None:
        import traceback

        tb = traceback.format_exc(limit=6)
        self.log(f"ERROR in {where}: {exc!r}")
        self.rec.note("error", where=where, error=repr(exc)[:500], traceback=tb[-2000:])

    def skip(self, what: str, why: str) -> None:
        self.log(f"skip {what}: {why}")
        self.rec.note("skip", what=what, why=why)

    def part(self, key: str, value: Any) -> None:
        """A part's condensed figures; once written, ``--resume`` does not measure the part again."""
        self.rec.note("part", key=key, value=value)


def build_model(ctx: Ctx, name: str, layers: int | None = None):
    """A random-weight bf16 model of ``name``'s config (SDPA attention) on the device, in eval mode."""
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
        torch.cuda.empty_cache()


def inputs(ctx: Ctx, vocab: int, batch: int, isl: int, seed: int = 1):
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(100, vocab - 1, (batch, isl), generator=g).to(ctx.device)
    return ids, torch.ones_like(ids)


def time_generate(ctx: Ctx, model, ids, mask, n: int, cache: str, max_cache_len: int) -> float:
    """Wall seconds of one generate() call, synchronised on both sides."""
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
    """generate() at one point: TTFT from generate(1), TPOT from generate(N) against it, medians of repeats."""
    if ctx.rec.has(generate_id(name, cache, batch, isl, osl)):
        return None  # --resume: measured (or failed) before
    lo, hi = ctx.plan["reps"]
    est = estimate_point_s(params_b, batch, isl, osl) * (lo + 1)
    if not ctx.budget.allows(est):
        ctx.skip(f"generate {name} {cache} b{batch} isl{isl}", f"budget: {ctx.budget.left():.0f}s left, "
                 f"point needs ~{est:.0f}s")
        return None
    vocab = int(model.config.vocab_size)
    ids, mask = inputs(ctx, vocab, batch, isl)
    max_cache_len = isl + osl
    t_start = time.perf_counter()
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats()
    steal0 = cpu_steal_ms()
    try:
        time_generate(ctx, model, ids, mask, min(4, osl), cache, max_cache_len)  # warm-up: prefill shape and decode
        t1s, tns = [time_generate(ctx, model, ids, mask, 1, cache, max_cache_len)], []
        tns.append(time_generate(ctx, model, ids, mask, osl, cache, max_cache_len))
        reps = reps_for(t1s[0] + tns[0], lo, hi)
        for _ in range(reps - 1):
            if not ctx.budget.allows(t1s[0] + tns[0]):
                break
            t1s.append(time_generate(ctx, model, ids, mask, 1, cache, max_cache_len))
            tns.append(time_generate(ctx, model, ids, mask, osl, cache, max_cache_len))
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


# ---- profiler


def _profile(ctx: Ctx, fn: Callable[[], Any]) -> tuple[list[dict], dict[str, Any]]:
    """Run ``fn`` under torch.profiler; (device events [{name, ts, dur, cat}], counts of host-side events)."""
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
    return condense(events, wall)


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


def profile_generate(ctx: Ctx, model, name: str, cache: str, batch: int, isl: int,
                     max_cache_len: int | None = None) -> dict | None:
    """Kernels of the prefill (generate(1)) and of one decode step ((generate(1+K) - generate(1)) / K).
    ``max_cache_len``: the static cache's length (default isl + K + 1; the compiled path passes the length it
    was compiled for, a new one would recompile)."""
    steps = int(ctx.plan["profile_steps"])
    ids, mask = inputs(ctx, int(model.config.vocab_size), batch, isl)
    mcl = max_cache_len or isl + steps + 1
    time_generate(ctx, model, ids, mask, 1 + steps, cache, mcl)  # warm
    d1, h1 = _profile(ctx, lambda: time_generate(ctx, model, ids, mask, 1, cache, mcl))
    dk, hk = _profile(ctx, lambda: time_generate(ctx, model, ids, mask, 1 + steps, cache, mcl))
    s1, sk = summarise(d1), summarise(dk)
    per_step = diff_rows(s1, sk, steps)
    prefill = {n: (c, t) for n, (c, t) in ((n, tuple(v)) for n, v in s1["by_name"].items())}
    _kernel_rows(ctx, name, cache, "prefill+first_token", batch, isl, prefill)
    _kernel_rows(ctx, name, cache, "decode_step", batch, isl, per_step)
    res = {
        "prefill": {"kernels": s1["kernels"], "memcpy": s1["memcpy"], "memset": s1["memset"],
                    "busy_ms": s1["busy_us"] / 1e3, "wall_profiled_ms": h1["wall_us"] / 1e3,
                    "launch_api": h1["launch"], "cpu_ops": h1["cpu_op"], "cpu_ops_top": h1["cpu_op_top"],
                    "categories": categories(prefill)},
        "decode_step": {
            "kernels": (sk["kernels"] - s1["kernels"]) / steps, "memcpy": (sk["memcpy"] - s1["memcpy"]) / steps,
            "memset": (sk["memset"] - s1["memset"]) / steps,
            "busy_ms": (sk["busy_us"] - s1["busy_us"]) / steps / 1e3,
            "wall_profiled_ms": (hk["wall_us"] - h1["wall_us"]) / steps / 1e3,
            "launch_api": (hk["launch"] - h1["launch"]) / steps, "cpu_ops": (hk["cpu_op"] - h1["cpu_op"]) / steps,
            "cpu_ops_top": (hk["cpu_op_top"] - h1["cpu_op_top"]) / steps,
            "memcpy_api": (hk["memcpy_api"] - h1["memcpy_api"]) / steps,
            "sync_api": (hk["sync_api"] - h1["sync_api"]) / steps, "categories": categories(per_step)},
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
    from transformers import DynamicCache

    ids, mask = inputs(ctx, int(model.config.vocab_size), batch, isl)
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

        r = host_loop(ctx.device, step, steps, reps=1, warmup=3)
    return {"wall_ms": r["wall_us"] / 1e3, "issue_ms": r["issue_us"] / 1e3,
            "device_elapsed_ms": r["device_us"] / 1e3 if r["device_us"] is not None else None}


def _count_modules(ctx: Ctx, model, batch: int, isl: int) -> int:
    """nn.Module calls in one decode forward (a global forward pre-hook counts them)."""
    from transformers import DynamicCache

    ids, mask = inputs(ctx, int(model.config.vocab_size), batch, isl)
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
    from transformers import DynamicCache

    ids, mask = inputs(ctx, int(model.config.vocab_size), batch, isl)
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
    s = summarise(dev)
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
            table = diff_rows(a, b, 2)
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
                "categories_per_layer": categories(table),
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
        ids, mask = inputs(ctx, int(model.config.vocab_size), batch, isl)
        try:
            time_generate(ctx, model, ids, mask, 4, "static-compile", isl + ctx.plan["osl"])  # compiles
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
