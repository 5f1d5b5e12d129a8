"""Skinny GEMMs on parts with slow tensor cores per SM (docs/narrow-gemm.md, issue 24)."""
from __future__ import annotations

import re

import pytest

from perfmodel import project
from perfmodel.paths import repo_root
from perfmodel.serialize import phase_bound

DOC = repo_root() / "docs" / "narrow-gemm.md"


def _tpot_ms(arch: str) -> tuple[float, str]:
    p = project(arch, "llama8b", batch=1, isl=1024, osl=128)
    return p.tpot_s * 1e3, phase_bound(p.decode)


def test_h20_batch1_decode_is_memory_bound_and_faster_than_h100():
    h20, bound = _tpot_ms("h20")
    h100, _ = _tpot_ms("h100-sxm")
    assert bound == "memory"
    assert h20 < h100  # 4.0 TB/s against 3.35 TB/s


def test_doc_figures_are_todays():
    text = DOC.read_text()
    m = re.search(r"memory-bound at ([\d.]+) ms a token \(the H100 ([\d.]+) ms, H200 ([\d.]+) ms", text)
    assert m, "docs/narrow-gemm.md lost its figures"
    for arch, shown in zip(("h20", "h100-sxm", "h200-sxm"), m.groups()):
        assert f"{_tpot_ms(arch)[0]:.1f}" == shown, arch


def test_gemv_variant_only_for_skinny_16_bit_products():
    from perfmodel import ops as O
    from perfmodel.cost import time_op
    from perfmodel.resolve import resolve_hardware, resolve_profile

    hw = resolve_hardware("h20")
    prof = resolve_profile(None, hw, "trtllm")
    t1 = time_op(O.gemm("g", 1, 4096, 4096, "bf16"), hw, prof)
    assert t1.bound == "memory"
    t_big = time_op(O.gemm("g", 4096, 4096, 4096, "bf16"), hw, prof)
    assert t_big.bound == "compute"


@pytest.mark.slow
def test_narrow_m_check_runs_where_aiconfigurator_is_installed():
    pytest.importorskip("aiconfigurator_core")
    pytest.importorskip("pyarrow")
    import importlib.util

    spec = importlib.util.spec_from_file_location("narrow", repo_root() / "docs" / "tools" / "narrow_m_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.BUCKETS
