"""Host costs of eager PyTorch as transformers' generate() pays them, measured directly: a tiny kernel's launch,
``nn.Module.__call__`` dispatch, a CPU-GPU sync, the dynamic cache's ``torch.cat`` against the static cache's
``index_copy_``, and generate()'s own setup of a call. Rows of ``host.csv`` (what :mod:`perfmodel.host_costs` reads).
"""
from __future__ import annotations

import time

import torch

from .hf_model import Ctx, inputs, time_generate
from .hf_plan import median
from .timing import capture_graph, host_loop, quiet_gc


def host_costs(ctx: Ctx) -> None:
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
            r = host_loop(ctx.device, fn, n)
            results[name] = r
            ctx.host.add(family=fam, name=name, n=n, unit="us/call", notes=note, **r)
        except Exception as exc:
            ctx.error(f"host {name}", exc)

    # device time of one tiny kernel when launched from a CUDA graph (no host in the way)
    if ctx.cuda:
        try:
            g, _ = capture_graph(lambda: [x.add_(1.0) for _ in range(200)], warmup=1)
            r = host_loop(ctx.device, g.replay, 20)
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
            r = host_loop(ctx.device, fn, nm if name != "linear_module" else n)
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
                r = host_loop(ctx.device, fn, max(200, n // 4))
                ctx.host.add(family="sync", name=name, n=max(200, n // 4), unit="us/call", notes=note, **r)
                results[name] = r
            except Exception as exc:
                ctx.error(f"host {name}", exc)
    ctx.part("host", results)


def cache_update_costs(ctx: Ctx) -> None:
    """Per layer (keys and values): DynamicLayer.update (two torch.cat of the whole cache) against
    StaticLayer.update (arange, add_, two index_copy_), at Llama-3.1-8B's KV shape (8 KV heads x 128)."""
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
                r = host_loop(ctx.device, fn, nrep, reps=3)
                ctx.host.add(family="cache_update", name=name, batch=batch, ctx=ctxlen, n=nrep, unit="us/layer",
                             notes=note + f"; KV {kvh}x{hd} bf16; bytes moved by cat "
                             f"{2 * 2 * batch * kvh * (ctxlen + 1) * hd * 2 / 1e6:.1f} MB", **r)
                out[f"{name}|b{batch}|ctx{ctxlen}"] = r
            del kc, vc, ks, vs
        except Exception as exc:
            ctx.error(f"cache b{batch} ctx{ctxlen}", exc)
    ctx.part("cache_update", out)


def request_setup(ctx: Ctx, model, name: str, batch: int = 1, isl: int = 128, rounds: int = 31) -> None:
    """generate()'s own work per call: generate(max_new_tokens=1) against the same prefill run by hand
    (forward with a fresh cache, argmax, the token copied to the host), alternating, medians of the
    differences; with the bare launch measured beside it, so that the setup carries to another host as a
    multiple of its launch cost."""
    ids, mask = inputs(ctx, int(model.config.vocab_size), batch, isl)

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
        time_generate(ctx, model, ids, mask, 1, "dynamic", isl + 1)
        by_hand()
    diffs, gens, hands = [], [], []
    for _ in range(rounds):
        g = time_generate(ctx, model, ids, mask, 1, "dynamic", isl + 1)
        h = by_hand()
        gens.append(g)
        hands.append(h)
        diffs.append(g - h)
    x = torch.randn(1024, device=ctx.device)
    launch = host_loop(ctx.device, lambda: x.add_(1.0), int(ctx.plan["host_n"]))
    ctx.host.add(family="request", name="generate_setup", model=name, batch=batch, ctx=isl,
                 layers=int(model.config.num_hidden_layers), wall_us=median(diffs) * 1e6,
                 wall_min_us=min(diffs) * 1e6, n=rounds, unit="us/request",
                 notes=f"generate(max_new_tokens=1) {median(gens) * 1e3:.2f} ms minus forward(use_cache=True) + "
                       f"argmax + copy {median(hands) * 1e3:.2f} ms, dynamic cache, alternating, GC off")
    ctx.host.add(family="launch", name="add_inplace", model=name, wall_us=launch["wall_us"],
                 issue_us=launch["issue_us"], device_us=launch["device_us"], wall_min_us=launch["wall_min_us"],
                 n=int(ctx.plan["host_n"]), unit="us/call", notes="beside the request setup: 1 kernel, x.add_(1)")
    ctx.part(f"request|{name}", {"setup_ms": median(diffs) * 1e3, "launch_us": launch["wall_us"]})
    ctx.log(f"request setup {name}: {median(diffs) * 1e3:.2f} ms (generate {median(gens) * 1e3:.2f}, by hand "
            f"{median(hands) * 1e3:.2f}); bare launch {launch['wall_us']:.2f} us")
