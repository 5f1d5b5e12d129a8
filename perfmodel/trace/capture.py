"""Capture profiler traces of a Hugging Face Llama forward on the GPU, for ``perfmodel trace import``.

    python -m perfmodel.trace.capture --out DIR [--layers 4] [--batch 1] [--seq 1024] [--context 1024]

Builds ``LlamaForCausalLM`` from a ``LlamaConfig`` with Llama-3.1-8B dimensions and a few layers, random
weights in bf16 (nothing downloaded), SDPA attention. Every module gets a ``record_function`` range named
``perfmodel:<module path>`` (forward pre/post hooks), which is how the importer attributes kernels. Then a
prefill step (batch x seq tokens, logits of the last position only) and a decode step (one token a
sequence over a cache of ``context`` tokens): three warm-up runs each, then one profiled run. Writes
DIR/llama_prefill.json.gz, DIR/llama_decode.json.gz and a sidecar JSON beside each (model dimensions,
phase, shapes, dtype, device, torch/transformers versions). Each step is guarded: a failure is recorded in
the sidecar and the other step still runs. Expected device time: under a minute.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

LLAMA_8B = {"hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "intermediate": 14336, "vocab": 128256}


def _annotate(model) -> None:
    import torch

    def pre(mod, _args):
        ctx = torch.profiler.record_function(f"perfmodel:{mod._perfmodel_name}")
        ctx.__enter__()
        mod._perfmodel_ctx = ctx

    def post(mod, _args, _out):
        ctx = getattr(mod, "_perfmodel_ctx", None)
        if ctx is not None:
            ctx.__exit__(None, None, None)
            mod._perfmodel_ctx = None

    for name, mod in model.named_modules():
        if not name:
            continue
        mod._perfmodel_name = name
        mod.register_forward_pre_hook(pre)
        mod.register_forward_hook(post)


def build_model(layers: int, device: str):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=LLAMA_8B["hidden"], intermediate_size=LLAMA_8B["intermediate"],
                      num_attention_heads=LLAMA_8B["heads"], num_key_value_heads=LLAMA_8B["kv_heads"],
                      head_dim=LLAMA_8B["head_dim"], num_hidden_layers=layers, vocab_size=LLAMA_8B["vocab"],
                      max_position_embeddings=16384, rope_theta=500000.0, rms_norm_eps=1e-5,
                      tie_word_embeddings=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(device=device, dtype=torch.bfloat16).eval()
    _annotate(model)
    return model


def _export(prof, path: Path) -> int:
    with tempfile.TemporaryDirectory() as d:
        raw = Path(d) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with open(raw, "rb") as src, gzip.open(path, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    return path.stat().st_size


def _sidecar(phase: str, layers: int, batch: int, seq: int, context: int, device: str, extra: dict) -> dict:
    import torch

    try:
        import transformers
        tv = transformers.__version__
    except Exception:
        tv = None
    dev = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    return {"model": {**{k: LLAMA_8B[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "intermediate",
                                                  "vocab")}, "layers": layers},
            "model_name": f"Llama-3.1-8B dimensions, {layers} layers, random weights", "phase": phase,
            "batch": batch, "seq": seq, "context": context, "dtype": "bf16", "device": dev, "torch": torch.__version__,
            "cuda": torch.version.cuda, "transformers": tv, "attention": "sdpa",
            "command": " ".join(["python -m perfmodel.trace.capture"] + sys.argv[1:]), **extra}


def _profile(fn, device: str, sustain_s: float = 0.0):
    """Warm up, optionally run ``fn`` back to back for ``sustain_s`` seconds (as a serving engine runs step
    after step: the part settles at its power-limited clock), then profile one run."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    for _ in range(3):
        fn()
    t0 = time.monotonic()
    while time.monotonic() - t0 < sustain_s:
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
    return prof


def capture(out: Path, layers: int = 4, batch: int = 1, seq: int = 1024, context: int = 1024, log=print,
            sustain_s: float = 0.0) -> list[Path]:
    import torch

    out.mkdir(parents=True, exist_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    written = []
    t0 = time.monotonic()
    model = build_model(layers, device)
    vocab = LLAMA_8B["vocab"]
    g = torch.Generator(device=device).manual_seed(0)

    def prefill():
        ids = torch.randint(0, vocab, (batch, seq), device=device, generator=g)
        with torch.no_grad():
            return model(input_ids=ids, use_cache=False, logits_to_keep=1)

    steps = [("prefill", seq, 0, prefill)]

    def make_decode():
        from transformers import DynamicCache

        ids = torch.randint(0, vocab, (batch, context), device=device, generator=g)
        cache = DynamicCache()
        with torch.no_grad():
            model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        nxt = torch.randint(0, vocab, (batch, 1), device=device, generator=g)
        pos = torch.full((batch, 1), context, device=device, dtype=torch.long)

        def decode():
            cache.crop(context)  # every run sees the same context
            with torch.no_grad():
                return model(input_ids=nxt, past_key_values=cache, use_cache=True, position_ids=pos,
                             cache_position=pos[0], logits_to_keep=1)
        return decode

    steps.append(("decode", 1, context, None))
    for phase, s, ctx, fn in steps:
        extra = {}
        path = out / f"llama_{phase}.json.gz"
        try:
            fn = fn or make_decode()
            prof = _profile(fn, device, sustain_s)
            extra["sustained_s"] = sustain_s
            size = _export(prof, path)
            extra["trace_bytes"] = size
            written.append(path)
            log(f"{phase}: wrote {path} ({size / 1e6:.2f} MB)")
        except Exception as e:  # one step failing still leaves the other
            extra["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            log(f"{phase}: failed: {extra['error']}")
        side = out / f"llama_{phase}.sidecar.json"
        side.write_text(json.dumps(_sidecar(phase, layers, batch, s, ctx, device, extra), indent=1) + "\n")
        written.append(side)
    log(f"capture done in {time.monotonic() - t0:.0f} s")
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.trace.capture", description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=1024, help="prefill tokens a sequence (default 1024)")
    ap.add_argument("--context", type=int, default=1024, help="cached tokens for the decode step (default 1024)")
    ap.add_argument("--sustain", type=float, default=0.0,
                    help="seconds of back-to-back runs before the profiled one (default 0: after an idle pause)")
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    capture(Path(args.out), args.layers, args.batch, args.seq, args.context,
            log=lambda s: print(s, file=sys.stderr, flush=True), sustain_s=max(0.0, args.sustain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
