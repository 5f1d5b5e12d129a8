"""Time the Triton kernels' configurations on the attached GPU: the model's proposals first, then, for
validation, every configuration the model considers valid, shape by shape.

    python -m perfmodel.tune.measure --out DIR --budget SECONDS [--top 8] [--workers N] [--shapes full|extended|tiny]

Writes DIR/tune_measurements.jsonl (one row a measured configuration, appended as it goes; a killed run
keeps what it measured and a rerun skips it) and DIR/environment.json. Order of work:

1. for every shape: torch's own kernel (cuBLAS / SDPA) as a reference, then the model's top-k proposals;
2. shape by shape (a shape finished before the next starts): the rest of the valid space, in the
   model's order, so a run cut by its budget leaves whole shapes.

Kernels compile in a pool of worker processes into Triton's on-disk cache, ahead of the timing loop; the
main process loads them from the cache. Every configuration is checked against torch (relative
Frobenius error of the output, poisoned with NaN first) before it is timed; a failure is a row with an
error. Timing: CUDA events around each call, an L2 flush (zeroing 2x the L2) before each and a GPU spin
that keeps the host's launches queued ahead of the GPU (:meth:`Bench._timed`), median of 10..40 repetitions
sized to ~4 ms of kernel time, after two warm-up calls; by default every kernel is compiled before the first
is timed. On a machine without CUDA the
same flow runs tiny shapes through Triton's interpreter (TRITON_INTERPRET=1) when Triton is installed,
or times torch alone.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROWS = "tune_measurements.jsonl"
SHAPE_SETS = ("full", "extended", "tiny")
ENVIRONMENT = "environment.json"
TOLERANCE = 2e-2  # relative Frobenius error of bf16 outputs (bf16 rounding alone is ~4e-3)
TARGET_S = 4e-3
MIN_REPS, MAX_REPS = 10, 40
# GPU spin before each timed call (~50 us at 2 GHz: longer than the host needs to queue a Triton launch,
# ~15-40 us) and once before a batch of calls (~1 ms): see Bench._timed
SLEEP_CYCLES = 100_000
HEAD_START_CYCLES = 2_000_000
TIMING = "queued"  # rows timed with the host kept behind the GPU (absent: the first run's direct timing)


# --- the work list ------------------------------------------------------------------------------------------

def _gemm_item(phase, name, m, n, k, pred, rank, grid="reduced"):
    return {"kind": "gemm", "phase": phase, "grid": grid, "shape_name": name, "shape": {"m": m, "n": n, "k": k, "dtype": "bf16"},
            "config": pred.config.as_dict() if pred else None, "key": pred.config.key if pred else "torch",
            "model_rank": rank, "predicted_s": pred.time_s if pred else None}


def _attn_item(phase, name, shape, pred, rank):
    return {"kind": "attention", "phase": phase, "shape_name": name, "shape": shape,
            "config": pred.config.as_dict() if pred else None, "key": pred.config.key if pred else "torch",
            "model_rank": rank, "predicted_s": pred.time_s if pred else None}


def row_id(item: dict) -> str:
    return f"{item['kind']}|{item['shape_name']}|{item['key']}"


def plan(hw, prof, gemm_shapes, attn_shapes, top: int, exhaustive: bool, grid: str = "reduced") -> list[dict]:
    from .rank import proposals, rank_attention, rank_gemm

    first, rest = [], []
    per_shape = []
    for name, m, n, k in gemm_shapes:
        r = rank_gemm(hw, prof, m, n, k, "bf16", grid)
        per_shape.append(("gemm", name, (m, n, k), r))
    for name, b, hq, hkv, sq, skv, d, causal in attn_shapes:
        r = rank_attention(hw, prof, b, hq, hkv, sq, skv, d, causal, "bf16")
        per_shape.append(("attention", name, r.shape, r))
    for kind, name, shape, r in per_shape:
        props = proposals(r, top)
        chosen = {p.config for p in props}
        order = {p.config: i for i, p in enumerate(r.ranked, start=1)}
        if kind == "gemm":
            first.append(_gemm_item("reference", name, *shape, None, None, grid))
            first += [_gemm_item("proposal", name, *shape, p, order[p.config], grid) for p in props]
            more = [_gemm_item("exhaustive", name, *shape, p, order[p.config], grid) for p in r.ranked
                    if p.config not in chosen]
        else:
            first.append(_attn_item("reference", name, shape, None, None))
            first += [_attn_item("proposal", name, shape, p, order[p.config]) for p in props]
            more = [_attn_item("exhaustive", name, shape, p, order[p.config]) for p in r.ranked if p.config not in chosen]
        rest.append(more)
    if not exhaustive:
        return first
    # interleave: one attention shape after every eight GEMM shapes
    gemm_rest = [x for x, (kind, *_) in zip(rest, per_shape) if kind == "gemm"]
    attn_rest = [x for x, (kind, *_) in zip(rest, per_shape) if kind == "attention"]
    ordered = []
    for i, block in enumerate(gemm_rest):
        ordered += block
        if (i + 1) % 8 == 0 and attn_rest:
            ordered += attn_rest.pop(0)
    for block in attn_rest:
        ordered += block
    return first + ordered


# --- storage ------------------------------------------------------------------------------------------------

def _append(path: Path, row: dict) -> None:
    from ..measure.store import clean_json

    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(clean_json(row), default=str) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def done_ids(path: Path) -> set[str]:
    from ..measure.store import iter_rows, repair

    repair(path)
    done = {str(r.get("id")) for r in iter_rows(path)}
    packed = path.with_name(path.name + ".gz")  # a committed run, compressed: its rows are measured too
    return done | {str(r.get("id")) for r in iter_rows(packed)} if packed.is_file() else done


# --- compiling ahead, in worker processes ----------------------------------------------------------------------

def compile_key(item: dict) -> tuple:
    s = item["shape"]
    if item["kind"] == "gemm":
        # Triton specialises integers by class (1, divisible by 16, other), not by value: one compile serves
        # every N, K of a class; EVEN_K is the kernel's own constexpr
        from .space import parse_gemm_key

        cfg = parse_gemm_key(item["key"])
        cls = lambda x: "1" if x == 1 else ("D" if x % 16 == 0 else "N")  # noqa: E731
        return ("gemm", item["key"], cls(s["n"]), cls(s["k"]), s["k"] % (cfg.block_k * cfg.split_k) == 0,
                s["n"], s["k"])
    return ("attention", item["key"], s["batch"], s["heads_q"], s["heads_kv"], s["seq_q"], s["seq_kv"],
            s["head_dim"], s["causal"])


def _compile_job(key: tuple) -> dict:
    """Run in a worker: compile one kernel into Triton's cache; report time and the compiler's resources."""
    t0 = time.perf_counter()
    try:
        import torch

        from .kernels import compile_attention, compile_matmul, kernel_resources
        from .space import parse_attention_key, parse_gemm_key

        if key[0] == "gemm":
            k = compile_matmul(parse_gemm_key(key[1]), key[5], key[6], torch.bfloat16)
        else:
            k = compile_attention(parse_attention_key(key[1]), *key[2:], torch.bfloat16)
        try:
            k._init_handles()
        except Exception:
            pass
        return {"compile_s": time.perf_counter() - t0, **kernel_resources(k)}
    except Exception as e:  # out of resources, a compiler error: the row records it
        return {"compile_s": time.perf_counter() - t0, "error": f"compile: {type(e).__name__}: {_first_line(e)}"}


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""


def _worker_init() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(0)


# --- timing ---------------------------------------------------------------------------------------------------

class Bench:
    def __init__(self, device: str):
        import torch

        self.torch = torch
        self.device = device
        self.cuda = device == "cuda"
        self.flush_buf = None
        if self.cuda:
            l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
            self.flush_buf = torch.empty(max(2 * l2, 128 << 20) // 4, dtype=torch.int32, device="cuda")

    def time(self, fn) -> dict:
        torch = self.torch
        t0 = time.perf_counter()
        if not self.cuda:
            fn()
            samples = []
            for _ in range(3):
                t = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t)
            return self._summary(samples, t0)
        fn()
        fn()
        torch.cuda.synchronize()
        one = statistics.median(self._timed(fn, 3))
        reps = int(max(MIN_REPS, min(MAX_REPS, round(TARGET_S / max(one, 1e-7)))))
        return self._summary(self._timed(fn, reps), t0)

    def _timed(self, fn, reps: int) -> list[float]:
        """GPU seconds of ``reps`` calls, each after an L2 flush. The GPU is kept ahead of the host: a
        spin kernel (``torch.cuda._sleep``) before the loop and one after each flush give the host time to
        queue the next call's launches before the start event fires, so a slow host launch (Triton's
        Python launcher, two launches for split-K, a busy CPU) is never counted as kernel time. Without
        them the first H200 run (calibration/h200-tune/tune_measurements.jsonl.gz) timed the host on small
        split-K kernels: up to 3x the kernel time, with p90/p10 spreads above 1.2."""
        torch = self.torch
        torch.cuda._sleep(HEAD_START_CYCLES)
        events = []
        for _ in range(reps):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.flush_buf.zero_()
            torch.cuda._sleep(SLEEP_CYCLES)
            s.record()
            fn()
            e.record()
            events.append((s, e))
        torch.cuda.synchronize()
        return [s.elapsed_time(e) / 1e3 for s, e in events]

    @staticmethod
    def _summary(samples, t0) -> dict:
        from ..measure.timing import quantile

        return {"time_s": statistics.median(samples), "p10_s": quantile(samples, 0.1),
                "p90_s": quantile(samples, 0.9), "reps": len(samples), "bench_s": time.perf_counter() - t0}


# --- one shape's tensors and checks --------------------------------------------------------------------------

def case_dtype(device: str):
    """bf16 on the GPU; fp16 on the CPU, where Triton's interpreter (numpy) has no bf16."""
    import torch

    return torch.bfloat16 if device == "cuda" else torch.float16


class GemmCase:
    def __init__(self, shape: dict, device: str, max_split: int):
        import torch

        dt = case_dtype(device)
        g = torch.Generator(device=device).manual_seed(0)
        m, n, k = shape["m"], shape["n"], shape["k"]
        self.a = torch.randn(m, k, device=device, generator=g).to(dt)
        self.w = (torch.randn(n, k, device=device, generator=g) / math.sqrt(k)).to(dt)
        self.ref = (self.a.float() @ self.w.float().T)
        self.out = torch.empty(m, n, device=device, dtype=dt)
        self.ws = torch.empty(max_split * m * n, device=device, dtype=torch.float32)
        self.torch = torch

    def reference(self):
        return lambda: self.torch.nn.functional.linear(self.a, self.w, out=None)

    def launcher(self, cfg):
        from .kernels import matmul_launcher

        return matmul_launcher(cfg, self.a, self.w, self.out, self.ws)

    def check(self, run) -> float:
        self.out.fill_(float("nan"))
        run()
        return float((self.out.float() - self.ref).norm() / self.ref.norm())


class AttentionCase:
    def __init__(self, shape: dict, device: str):
        import torch

        dt = case_dtype(device)
        g = torch.Generator(device=device).manual_seed(0)
        b, hq, hkv = shape["batch"], shape["heads_q"], shape["heads_kv"]
        sq, skv, d = shape["seq_q"], shape["seq_kv"], shape["head_dim"]
        self.q = torch.randn(b, hq, sq, d, device=device, generator=g).to(dt)
        self.k = torch.randn(b, hkv, skv, d, device=device, generator=g).to(dt)
        self.v = torch.randn(b, hkv, skv, d, device=device, generator=g).to(dt)
        self.out = torch.empty_like(self.q)
        self.causal = bool(shape["causal"])
        self.torch = torch
        rep = hq // hkv
        kk, vv = self.k.repeat_interleave(rep, 1).float(), self.v.repeat_interleave(rep, 1).float()
        s = (self.q.float() @ kk.transpose(-1, -2)) / math.sqrt(d)
        if self.causal:  # queries are the last sq of the skv positions
            i = torch.arange(sq, device=device)[:, None] + (skv - sq)
            s = s.masked_fill(torch.arange(skv, device=device)[None, :] > i, float("-inf"))
        self.ref = torch.softmax(s, -1) @ vv

    def reference(self):
        F = self.torch.nn.functional
        return lambda: F.scaled_dot_product_attention(self.q, self.k, self.v, is_causal=self.causal, enable_gqa=True)

    def launcher(self, cfg):
        from .kernels import attention_launcher

        return attention_launcher(cfg, self.q, self.k, self.v, self.out, self.causal)

    def check(self, run) -> float:
        self.out.fill_(float("nan"))
        run()
        return float((self.out.float() - self.ref).norm() / self.ref.norm())


# --- the run -------------------------------------------------------------------------------------------------

def _estimate(items: list[dict], compiles: int, workers: int) -> float:
    """Seconds the work list needs: timing from the model's predictions, compiling ~1 s a kernel a worker."""
    t = 0.0
    for it in items:
        pred = it["predicted_s"] or 1e-4
        reps = max(MIN_REPS, min(MAX_REPS, TARGET_S / pred))
        t += (reps + 6) * (pred + 60e-6) + 3e-3
    return t + compiles * 1.0 / max(1, workers)


def run(out: Path, budget_s: float, *, top: int = 8, workers: int = 0, shapes: str = "full", arch: str = "h200",
        calibration: str | None = None, exhaustive: bool = True, compile_first: bool = True,
        only: tuple[str, ...] = (), log=print) -> int:
    started = time.monotonic()
    out.mkdir(parents=True, exist_ok=True)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    try:
        import triton  # noqa: F401
        have_triton = True
    except ImportError:
        have_triton = False

    from ..measure.environment import Environment
    from ..measure.store import write_json_atomic
    from ..resolve import resolve_hardware, resolve_profile
    from .shapes import TINY_ATTENTION_SHAPES, TINY_GEMM_SHAPES, shape_set
    from .space import AttentionConfig, GemmConfig

    hw = resolve_hardware(arch)
    prof = resolve_profile(calibration, hw, "torch")
    tiny = shapes == "tiny" or device == "cpu"
    gs, ats = (TINY_GEMM_SHAPES, TINY_ATTENTION_SHAPES) if tiny else shape_set(shapes)
    if only:
        unknown = sorted(set(only) - {x[0] for x in gs} - {x[0] for x in ats})
        if unknown:
            from ..errors import InputError

            raise InputError(f"no shape {unknown[0]!r} in the {shapes} set", field="--only")
        gs, ats = [x for x in gs if x[0] in only], [x for x in ats if x[0] in only]
    items = plan(hw, prof, gs, ats, top, exhaustive and not tiny)
    path = out / ROWS
    done = done_ids(path)
    todo = [it for it in items if row_id(it) not in done]
    if not have_triton:
        todo = [it for it in todo if it["phase"] == "reference"]
    keys = []
    seen = set()
    by_class = {}
    for it in todo:
        if it["config"] is not None and device == "cuda":
            ck = compile_key(it)
            cls = ck[:5] if ck[0] == "gemm" else ck
            if cls not in seen:
                seen.add(cls)
                keys.append(ck)
            by_class.setdefault(cls, ck)  # the representative compiled for the whole class
    # compiling first, the CPU is the workers' alone; overlapped with timing, two cores stay for the host
    workers = workers or max(1, (os.cpu_count() or 2) - (1 if compile_first else 2))
    env = Environment(device)
    write_json_atomic(out / ENVIRONMENT, env.document(
        command=" ".join(["python -m perfmodel.tune.measure"] + sys.argv[1:]), budget_s=budget_s, spec=hw.key,
        calibration=prof.label, shapes=shapes if not tiny else "tiny", triton_available=have_triton,
        interpreter=device == "cpu", planned_rows=len(items), already_measured=len(done), timing=TIMING,
        sleep_cycles=SLEEP_CYCLES, compile_first=compile_first))
    est = _estimate(todo, len(keys), workers)
    log(f"tune measure: {len(todo)} rows to measure ({len(done)} already in {path}), {len(keys)} kernels to compile "
        f"on {workers} workers; estimate {est:.0f} s, budget {budget_s:.0f} s")
    if not have_triton:
        log("Triton is not installed: timing torch's own kernels only")

    pool, futures = None, {}
    if keys:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        pool = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"), initializer=_worker_init)
        futures = {k: pool.submit(_compile_job, k) for k in keys}
        if compile_first:
            # time nothing while the workers compile: a CPU busy with 14 compilers delays the host's launches
            from concurrent.futures import wait

            t_c = time.monotonic()
            wait(list(futures.values()), timeout=max(1.0, budget_s - (time.monotonic() - started) - 2.0))
            log(f"tune measure: {len(keys)} kernels compiled in {time.monotonic() - t_c:.0f} s")

    bench = Bench(device)
    cases: dict[str, object] = {}
    measured = 0
    try:
        for it in todo:
            left = budget_s - (time.monotonic() - started)
            if left < 2.0:
                log(f"budget reached after {measured} rows")
                break
            name = it["shape_name"]
            if name not in cases:
                cases.clear()  # one shape's tensors at a time
                if device == "cuda":
                    torch.cuda.empty_cache()
                cases[name] = (GemmCase(it["shape"], device, 16) if it["kind"] == "gemm"
                               else AttentionCase(it["shape"], device))
            case = cases[name]
            row = {"id": row_id(it), "operand_dtype": str(case_dtype(device)).replace("torch.", ""), **{k: it[k] for k in ("kind", "phase", "shape_name", "shape", "config", "key",
                                                          "model_rank", "predicted_s") if k in it},
                   "grid": it.get("grid", "full"), "timing": TIMING}
            try:
                if it["config"] is None:
                    run_fn = case.reference()
                    row.update(bench.time(run_fn))
                else:
                    if it["kind"] == "gemm":
                        cfg = GemmConfig(**it["config"])
                    else:
                        cfg = AttentionConfig(**it["config"])
                    ck = compile_key(it)
                    fut = futures.get(by_class.get(ck[:5] if ck[0] == "gemm" else ck)) if futures else None
                    if fut is not None:
                        info = fut.result(timeout=max(1.0, left))
                        if "error" in info:
                            if "OutOfResources" in info["error"] or "out of resource" in info["error"]:
                                row.update(info)
                                raise RuntimeError(info["error"])
                            # anything else: compile here instead (the launcher's first call does)
                            info = {"worker_error": info["error"], "compile_s": info.get("compile_s")}
                        row.update(info)
                    run_fn = case.launcher(cfg)
                    t0 = time.perf_counter()
                    err = case.check(run_fn)
                    row["first_call_s"] = time.perf_counter() - t0
                    row["rel_err"] = err
                    if not (err < TOLERANCE):
                        raise RuntimeError(f"wrong result: relative error {err:.3g} >= {TOLERANCE}")
                    row.update(bench.time(run_fn))
            except Exception as e:  # one failure is a row, never a crash
                row.setdefault("error", f"{type(e).__name__}: {_first_line(e)}")
                if device == "cuda":
                    torch.cuda.synchronize()
            row["env"] = env.row_env() if measured % 50 == 0 else None
            _append(path, row)
            measured += 1
    finally:
        if pool is not None:
            for p in list(getattr(pool, "_processes", {}).values()):
                p.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
    log(f"tune measure: {measured} rows written to {path} in {time.monotonic() - started:.0f} s")
    return measured


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.tune.measure", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="folder for tune_measurements.jsonl and environment.json")
    ap.add_argument("--budget", type=float, default=270.0, help="seconds; stop cleanly after this (default 270)")
    ap.add_argument("--top", type=int, default=8, help="model proposals per shape (default 8)")
    ap.add_argument("--workers", type=int, default=0, help="compile processes (default: cores - 2, at most 14)")
    ap.add_argument("--shapes", choices=SHAPE_SETS, default="full",
                    help="full: the 38 shapes of the first run; extended: those and more; tiny: CPU smoke test")
    ap.add_argument("--overlap-compile", action="store_true",
                    help="time while the workers still compile (faster; the host's launches may be delayed)")
    ap.add_argument("--only", default="", help="comma-separated shape names of the set to measure (default: all)")
    ap.add_argument("--arch", default="h200", help="hardware spec the model ranks for (default h200)")
    ap.add_argument("--calibration", default=None)
    ap.add_argument("--proposals-only", action="store_true", help="skip the exhaustive validation pass")
    args = ap.parse_args(argv)
    from ..errors import InputError

    try:
        run(Path(args.out), args.budget, top=args.top, workers=args.workers, shapes=args.shapes, arch=args.arch,
            calibration=args.calibration, exhaustive=not args.proposals_only, compile_first=not args.overlap_compile,
            only=tuple(x for x in args.only.split(",") if x), log=lambda s: print(s, file=sys.stderr, flush=True))
    except InputError as e:
        print(f"perfmodel: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
