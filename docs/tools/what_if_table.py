"""The tables of docs/what-if.md: the issue's what-if examples written as spec files and as sweeps of the same
figure, and the departures from monotonicity the generated suite (tests/test_what_if.py) found, bounded.

    python docs/tools/what_if_table.py          # a few seconds
"""
from __future__ import annotations

import tempfile
from pathlib import Path

# (name, the spec file's text, the library part, the sweep field, its value, model, scenario)
EXAMPLES = (
    ("H200 at 2x HBM bandwidth", "extends: h200-sxm\nname: H200 2x HBM\nmemory:\n"
     "  bandwidth: {value: 9.6 TB/s, source: estimate}\n", "h200-sxm", "hbm_bandwidth", 9.6e12, "llama8b", {}),
    ("B200 at 10 TB/s", "extends: b200\nname: B200 at 10 TB/s\nmemory:\n"
     "  bandwidth: {value: 10 TB/s, source: estimate}\n", "b200", "hbm_bandwidth", 10e12, "llama70b", {}),
    ("H100 at 4.8 TB/s", "extends: h100-sxm\nname: H100 at 4.8 TB/s\nmemory:\n"
     "  bandwidth: {value: 4.8 TB/s, source: estimate}\n", "h100-sxm", "hbm_bandwidth", 4.8e12, "llama8b", {}),
    ("H200 with 1.5x the SMs", "extends: h200-sxm\nname: H200 1.5x SMs\ncompute:\n"
     "  sm_count: {value: 198, source: estimate}\n", "h200-sxm", "sm_count", 198, "llama70b",
     {"tp": 4, "batch": 16}),
)


def _ms(s: float) -> str:
    return f"{s * 1e3:.2f}"


def examples() -> str:
    from perfmodel import project
    from perfmodel.spec import load_spec, spec_with

    lines = ["| what-if | model | part TPOT (ms) | spec file TPOT | sweep TPOT | spec file TTFT / sweep TTFT (ms) "
             "| GEMM calibration of the spec file |",
             "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as d:
        for name, text, part, field, value, model, kw in EXAMPLES:
            path = Path(d) / ("".join(c if c.isalnum() else "-" for c in name.lower()) + ".yaml")
            path.write_text(text)
            base = project(part, model, **kw)
            by_file = project(str(path), model, **kw)
            by_sweep = project(spec_with(load_spec(part), **{field: value}), model, **kw)
            gemm = by_file.profile.provenance.get("families", {}).get("gemm", {})
            lines.append(f"| {name} | {model} | {_ms(base.tpot_s)} | {_ms(by_file.tpot_s)} | {_ms(by_sweep.tpot_s)} "
                         f"| {_ms(by_file.ttft_s)} / {_ms(by_sweep.ttft_s)} | {gemm.get('source', '-')} |")
    return "\n".join(lines)


SCENARIOS = (("llama8b", {}), ("llama70b", {"tp": 4, "batch": 16, "dtype": "fp8"}), ("mixtral", {"tp": 2, "batch": 8}))
SM_FACTORS = (1.25, 1.5, 2.0, 4.0)
BANDWIDTH_FACTORS = (1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0)


def worst_change(better, factors) -> tuple[float, tuple]:
    """(the largest TPOT change, (part, model, scenario, factor, TPOT before)) of ``better(spec, factor)`` over
    every NVIDIA part, the what-if suite's three scenarios (those that fit) and ``factors``."""
    from perfmodel import project
    from perfmodel.errors import InputError
    from perfmodel.spec import list_specs, load_spec

    worst = (-1.0, ())
    for p in list_specs():
        if p.vendor != "nvidia":
            continue
        hw = load_spec(p.key)
        for model, kw in SCENARIOS:
            try:
                a = project(hw, model, **kw).tpot_s
            except InputError:  # does not fit the part
                continue
            for f in factors:
                worst = max(worst, (project(better(hw, f), model, **kw).tpot_s / a - 1, (p.key, model, kw, f, a)),
                            key=lambda w: w[0])
    return worst


def more_sms(hw, f):
    from perfmodel.spec import spec_with

    return spec_with(hw, sm_count=float(round(hw.sm_count * f)))


def more_bandwidth(hw, f):
    from perfmodel.spec import spec_with

    return spec_with(hw, hbm_bandwidth=hw.hbm_bandwidth * f)


def departures() -> str:
    """The largest TPOT change per finding: more SMs and more HBM bandwidth over every NVIDIA part and the suite's
    three scenarios; the bf16 rate alone on the H20, where it was found."""
    from perfmodel import project
    from perfmodel.spec import load_spec, spec_with

    sms, (part, model, _, f, _) = worst_change(more_sms, SM_FACTORS)
    lines = ["| finding | worst case | TPOT change |", "|---|---|---|",
             f"| more SMs (rates scaled with them), 3 scenarios, 1.25-4x | {part}, {model}, {f:g}x | {sms:+.2%} |"]
    kw = {"tp": 4, "batch": 16, "dtype": "fp8"}
    hw = load_spec("h20")
    a = project(hw, "llama70b", **kw).tpot_s
    b = project(spec_with(hw, **{"tensor_flops.bf16": hw.tensor_flops["bf16"] * 1.5}), "llama70b", **kw).tpot_s
    lines.append(f"| 1.5x the bf16 rate alone, Llama-3.1-70B fp8 TP 4 batch 16 | h20 | {b / a - 1:+.2%} |")
    lines.append("| more HBM bandwidth, 3 scenarios, 1.05-4x (a power-bound part) | {1} | {0:+.2%} |".format(
        *bandwidth_departure()))
    return "\n".join(lines)


def bandwidth_departure() -> tuple[float, str]:
    """(the largest TPOT change, where) of more HBM bandwidth over every NVIDIA part, the suite's three scenarios
    and BANDWIDTH_FACTORS, refined around the worst in steps of 0.05x: what tests/test_what_if.py allows."""
    from perfmodel import project
    from perfmodel.spec import load_spec

    worst = worst_change(more_bandwidth, BANDWIDTH_FACTORS)
    key, model, kw, f0, a = worst[1]
    hw = load_spec(key)
    for f in (f0 + 0.05 * i for i in range(-9, 10)):  # the peak between the grid's factors
        if 1.05 <= f <= 4.0:
            worst = max(worst, (project(more_bandwidth(hw, f), model, **kw).tpot_s / a - 1, (key, model, kw, f, a)),
                        key=lambda w: w[0])
    key, model, _, f, _ = worst[1]
    return worst[0], f"{key}, {model}, {f:.2f}x"


if __name__ == "__main__":
    print(examples())
    print()
    print(departures())
