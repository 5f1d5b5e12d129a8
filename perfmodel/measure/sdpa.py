"""PyTorch's scaled-dot-product attention backends: forcing one, and finding which one ran.

``F.scaled_dot_product_attention`` called plainly picks a backend itself (on Hopper with cuDNN 9, torch
2.5+ prefers cuDNN's fused attention for many shapes); forced with ``sdpa_kernel`` it runs one backend
or refuses the inputs. The suite measures the plain call ("default") and every backend forced, and
records, from the CUDA kernels ``torch.profiler`` sees, which backend the plain call dispatched to.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch
import torch.nn.functional as F

# Forced backends, by our name -> SDPBackend attribute. "default" means: nothing forced.
BACKEND_ATTRS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION",
                 "math": "MATH"}
DEFAULT = "default"


def forced(name: str) -> Any:
    """The SDPBackend enum member for ``name``, None for "default"; raises for one this torch lacks."""
    if name == DEFAULT:
        return None
    from torch.nn.attention import SDPBackend

    member = getattr(SDPBackend, BACKEND_ATTRS[name], None)
    if member is None:
        raise RuntimeError(f"this torch has no SDPA backend {name!r}")
    return member


def backend_context(name: str) -> contextlib.AbstractContextManager:
    member = forced(name)
    if member is None:
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel([member])


def sdpa(q, k, v, *, causal: bool, gqa: bool) -> torch.Tensor:
    """Plain SDPA with grouped KV heads handled by the kernel (``enable_gqa``), as torch >= 2.5 does."""
    if gqa:
        try:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
        except TypeError:  # torch < 2.5: no enable_gqa; expand k/v (moves group x the KV bytes)
            rep = q.shape[-3] // k.shape[-3]
            k = k.repeat_interleave(rep, dim=-3)
            v = v.repeat_interleave(rep, dim=-3)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def classify_kernels(names: list[str]) -> str:
    """The SDPA backend a list of CUDA kernel names belongs to (``torch.profiler``'s names)."""
    low = [n.lower() for n in names]
    if any("cudnn" in n or "fort_native_sdpa" in n or ("fprop" in n and "sdpa" in n) for n in low):
        return "cudnn"
    if any("flash_fwd" in n or "flash::" in n or "flash_attn" in n for n in low):
        return "flash"
    if any("fmha" in n or "efficient_attention" in n or "attentionkernel" in n or "mem_eff" in n for n in low):
        return "efficient"
    return "math" if names else "unknown"


def dispatched(call: Callable[[], object], device: str) -> tuple[str, list[str]]:
    """(backend, kernel names) of one call of ``call`` as plain PyTorch runs it. On CPU there are no
    kernel names: ("cpu", [])."""
    if not device.startswith("cuda"):
        return "cpu", []
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        names: list[str] = []
        for e in prof.events():
            if getattr(e, "device_type", None) == DeviceType.CUDA and e.name not in names:
                names.append(e.name)
    except Exception as exc:  # a profiler that cannot start must not cost the measurement
        return "unknown", [f"profiler failed: {type(exc).__name__}: {str(exc)[:100]}"]
    return classify_kernels(names), [n[:160] for n in names[:32]]
