"""Build the SYNTHETIC test fixture ``synthetic_llama_prefill.json.gz`` (+ its sidecar): a trace in the PyTorch
profiler's Chrome/Kineto format for a tiny two-layer Llama-style model. It is NOT a measurement: the kernel
durations below are made-up fixed numbers, chosen only to be plausible, so that the trace importer's tests
have a small, deterministic input with the structure of a real capture (host user annotations per module,
cudaLaunchKernel runtime events, GPU kernels linked to them by correlation id, HF-style eager kernel names).

    python tests/data/traces/make_fixture.py            # rewrites the fixture beside this script

The real trace of a Hugging Face Llama forward comes from ``python -m perfmodel.trace.capture`` on a GPU.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

MODEL = {"hidden": 512, "layers": 2, "heads": 8, "kv_heads": 2, "head_dim": 64, "intermediate": 1536, "vocab": 4096}
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel"
EW = "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::BFloat16>>"
RED = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>>>"
CAT = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<at::native::OpaqueType<2u>, unsigned int, 4, 64, 64>"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutlass::bfloat16_t>>"
INDEX = "void at::native::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, true>"

# (module path relative to a layer or the model, [(kernel name, duration in us)]) in launch order
LAYER = [
    ("input_layernorm", [(EW, 1.6), (RED, 2.4), (EW, 1.5), (EW, 1.5), (EW, 1.4)]),
    ("self_attn.q_proj", [(GEMM, 6.0)]),
    ("self_attn.k_proj", [(GEMM, 4.5)]),
    ("self_attn.v_proj", [(GEMM, 4.5)]),
    ("self_attn", [(EW, 1.5), (EW, 1.4), (CAT, 1.8), (EW, 1.4), (EW, 1.5), (EW, 1.4), (CAT, 1.7), (EW, 1.4),
                   (CAT, 1.9), (CAT, 1.9), (FLASH, 9.0)]),
    ("self_attn.o_proj", [(GEMM, 5.5)]),
    ("", [(EW, 1.6)]),
    ("post_attention_layernorm", [(EW, 1.6), (RED, 2.4), (EW, 1.5), (EW, 1.5), (EW, 1.4)]),
    ("mlp.gate_proj", [(GEMM, 9.0)]),
    ("mlp.up_proj", [(GEMM, 9.0)]),
    ("mlp.act_fn", [(EW, 2.2)]),
    ("mlp", [(EW, 2.0)]),
    ("mlp.down_proj", [(GEMM, 8.5)]),
    ("", [(EW, 1.6)]),
]
TOP = [("model.embed_tokens", [(INDEX, 2.5)]), ("model.rotary_emb", [(EW, 1.2), (EW, 1.2)])]
BOTTOM = [("model.norm", [(EW, 1.5), (RED, 2.2), (EW, 1.4), (EW, 1.4), (EW, 1.3)]), ("lm_head", [(GEMM, 12.0)])]


def build(annotate: bool = True) -> dict:
    events = []
    ts = 1000.0  # host clock, us
    gpu = 5000.0
    corr = 0

    def module(path: str, kernels) -> None:
        nonlocal ts, gpu, corr
        start = ts
        for name, dur in kernels:
            corr += 1
            ts += 2.0
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": ts, "dur": 3.0, "args": {"correlation": corr}})
            ts += 3.0
            gpu = max(gpu, ts + 5.0)
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": gpu, "dur": dur,
                           "args": {"correlation": corr, "stream": 7, "device": 0}})
            gpu += dur
        if annotate:
            events.append({"ph": "X", "cat": "user_annotation", "name": f"perfmodel:{path}", "pid": 1, "tid": 1,
                           "ts": start, "dur": ts - start + 1.0})
        ts += 1.0

    for path, ks in TOP:
        module(path, ks)
    for i in range(MODEL["layers"]):
        layer_start = ts
        for rel, ks in LAYER:
            module(f"model.layers.{i}" + (f".{rel}" if rel else ""), ks)
        if annotate:  # the enclosing ranges (the innermost one wins)
            events.append({"ph": "X", "cat": "user_annotation", "name": f"perfmodel:model.layers.{i}", "pid": 1,
                           "tid": 1, "ts": layer_start - 0.5, "dur": ts - layer_start + 1.0})
            for parent in ("self_attn", "mlp"):
                kids = [e for e in events if e.get("cat") == "user_annotation"
                        and e["name"].startswith(f"perfmodel:model.layers.{i}.{parent}.")]
                s = min(e["ts"] for e in kids) - 0.25
                e_ = max(e["ts"] + e["dur"] for e in kids) + 0.25
                own = [e for e in events if e.get("cat") == "user_annotation"
                       and e["name"] == f"perfmodel:model.layers.{i}.{parent}"]
                if own:  # widen the module's own range over its children
                    s = min(s, own[0]["ts"])
                    e_ = max(e_, own[0]["ts"] + own[0]["dur"])
                    events.remove(own[0])
                events.append({"ph": "X", "cat": "user_annotation", "name": f"perfmodel:model.layers.{i}.{parent}",
                               "pid": 1, "tid": 1, "ts": s, "dur": e_ - s})
    for path, ks in BOTTOM:
        module(path, ks)
    return {"schemaVersion": 1, "displayTimeUnit": "ms", "traceEvents": events,
            "note": "SYNTHETIC test fixture made by tests/data/traces/make_fixture.py; not a measurement"}


SIDECAR = {"model": MODEL, "model_name": "synthetic-tiny-llama", "phase": "prefill", "batch": 1, "seq": 128,
           "context": 0, "dtype": "bf16", "device": "synthetic (test fixture, not a measurement)",
           "note": "SYNTHETIC test fixture made by tests/data/traces/make_fixture.py"}


def write(folder: Path, annotate: bool = True, stem: str = "synthetic_llama_prefill") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    trace = folder / f"{stem}.json.gz"
    with gzip.GzipFile(trace, "wb", mtime=0) as fh:
        fh.write(json.dumps(build(annotate)).encode())
    (folder / f"{stem}.sidecar.json").write_text(json.dumps(SIDECAR, indent=1) + "\n")
    return trace


if __name__ == "__main__":
    print(write(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent))
