"""Part first or engine first? Each shipped engine table's GEMM and MoE rows priced by the profile each rule
would pick if that table were missing (the evidence for the ranking in perfmodel/evidence.py).

For every imported table T (engine E on part P) and family F: the *part-first* pick is the best other profile
measured on P (engines in the preset's ``near`` order, perfmodel.engines); the *engine-first* pick is E's own table from the nearest other
part (generation distance, then bandwidth), carried to P by perfmodel.transfer. Both price all of T's rows of
F (none of them was fitted by either pick). The engine-first pick is made twice: from a part of P's tensor-core
instruction family (wgmma: Hopper; tcgen05: Blackwell) and from the nearest part of another family.

    python docs/tools/evidence_ranking.py            # the table, and the counts per family
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np

from perfmodel import evidence, generations
from perfmodel.engines import engine_distance
from perfmodel.fit.latency import load_cases, op_class, predict_cases
from perfmodel.paths import calibration_dir
from perfmodel.resolve import available_profiles, source_spec
from perfmodel.transfer import carry


def _rows(folder: Path) -> list[dict]:
    plain, packed = folder / "measurements.jsonl", folder / "measurements.jsonl.gz"
    f = gzip.open(packed, "rt") if packed.is_file() else open(plain)
    with f:
        return [json.loads(line) for line in f if line.strip()]


def _mma(spec) -> str | None:
    g = generations.get(spec.generation) if spec is not None else None
    return g.mma if g is not None else None


def _median_error(prof, spec, hw, cases) -> float:
    pred = predict_cases(cases, hw, carry(prof, spec, hw))
    meas = np.array([c.time_s for c in cases])
    return float(np.median(np.abs(pred / meas - 1.0)))


def compare(families=("gemm", "moe")) -> list[dict]:
    profs = [(folder, p, source_spec(p)) for folder, p in available_profiles() if p.fitted]
    out = []
    for folder, target, hw in profs:
        if target.engine == "torch" or hw is None:
            continue
        cases = load_cases(_rows(folder), 0.0, 0)[0]
        others = [(p, s) for f, p, s in profs if f != folder and s is not None and s.vendor == hw.vendor]
        for fam in families:
            sub = [c for c in cases if op_class(c.kind) == fam]
            usable = [(p, s) for p, s in others if fam in evidence.measured_families(p)]
            same_part = [(p, s) for p, s in usable if p.spec_key == hw.key]
            same_engine = [(p, s) for p, s in usable if p.engine == target.engine]
            if not sub or not same_part or not same_engine:
                continue
            part = min(same_part, key=lambda ps: (engine_distance(target.engine, ps[0].engine), ps[0].name))
            near = lambda ps: (evidence._generation_distance(ps[1].generation, hw.generation),  # noqa: E731
                               abs(ps[1].hbm_bandwidth - hw.hbm_bandwidth), ps[0].name)
            part_error = _median_error(*part, hw, sub)
            for same in (True, False):  # the engine's table from a part of the same / another instruction family
                pool = [ps for ps in same_engine if (_mma(ps[1]) == _mma(hw)) == same]
                if not pool:
                    continue
                eng = min(pool, key=near)
                out.append({"table": target.name, "family": fam, "rows": len(sub),
                            "part_first": part[0].name, "part_first_error": part_error,
                            "engine_first": eng[0].name, "engine_first_error": _median_error(*eng, hw, sub),
                            "same_mma": same})
    return out


def main() -> int:
    res = compare()
    print("| table | family | rows | part first | error | engine first (carried) | error | same MMA family |")
    print("|---|---|---|---|---|---|---|---|")
    for r in res:
        print(f"| {r['table']} | {r['family']} | {r['rows']} | {r['part_first']} | {r['part_first_error']:.1%} | "
              f"{r['engine_first']} | {r['engine_first_error']:.1%} | {'yes' if r['same_mma'] else 'no'} |")
    print()
    for fam in sorted({r["family"] for r in res}):
        for same in (True, False):
            sel = [r for r in res if r["family"] == fam and r["same_mma"] == same]
            wins = sum(r["engine_first_error"] < r["part_first_error"] for r in sel)
            print(f"{fam}, {'same' if same else 'other'} instruction family: engine first better in {wins} of {len(sel)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
