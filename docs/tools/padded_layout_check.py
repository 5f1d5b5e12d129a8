"""What the padded blocks of a worst-case MoE layout cost, measured on a lent GPU, against how the projection prices them.

Reads the rows :mod:`perfmodel.measure.padded_layout` wrote (``calibration/h200/padded-layout-h100``, measured on an
H100): per layer, product and decode token count the grouped product over the reached experts' blocks alone
(``routed``), with the rest of the worst-case layout computed as expert 0's (``padded``, vLLM 0.12) and that rest
alone as one product (``dense``).
Prints, per layer and product, the medians over the token counts of ``(padded - routed) / dense`` (1: the padding
adds its own product's time; 0: it hides behind the real blocks) and of the projection's price of the padding
(:func:`perfmodel.graph.padded_expert_ops`' products: the fitted block-fp8 GEMM model of vLLM's tables on the part
measured) over the measured ``padded - routed``.

    python docs/tools/padded_layout_check.py [--folder DIR]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

FOLDER = ROOT / "calibration" / "h200" / "padded-layout-h100"


def measured(folder: Path = FOLDER) -> dict[tuple, dict[str, dict]]:
    """{(layer, product, tokens): {variant: row}} of the folder's timed rows."""
    path = folder / "measurements.jsonl"
    if not path.is_file():
        print(f"padded_layout_check: error: no measurements at {path} (python -m perfmodel.measure.padded_layout on a "
              "GPU writes them; --folder DIR reads another run)", file=sys.stderr)
        raise SystemExit(2)
    out: dict[tuple, dict[str, dict]] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line) if line.strip() else {}
            if r.get("kind") == "padded_layout" and r.get("time_s"):
                p = r["params"]
                out.setdefault((p["layer"], p["product"], p["tokens"]), {})[p["variant"]] = r
    return out


def _part(folder: Path):
    from perfmodel.fit.directory import match_spec, read_environment
    from perfmodel.resolve import resolve_hardware

    env = read_environment(folder / "environment.json")
    return match_spec(env, None) if env else resolve_hardware("h200-sxm")


def compare(folder: Path = FOLDER) -> list[dict]:
    """Per layer and product: the token counts measured, the median padding share ``(padded - routed) / dense`` and
    the median of the projection's price of the padding product over the measured ``padded - routed``."""
    from perfmodel import ops as O
    from perfmodel.cost import time_op
    from perfmodel.resolve import resolve_profile

    hw = _part(folder)
    prof = resolve_profile(None, hw, "vllm")
    groups: dict[tuple, list[tuple[float, float]]] = {}
    for (layer, product, tokens), v in sorted(measured(folder).items()):
        if not {"routed", "padded", "dense"} <= set(v):
            continue
        extra = v["padded"]["time_s"] - v["routed"]["time_s"]
        p = v["dense"]["params"]
        op = O.gemm("moe.padding", v["dense"]["rows"], p["n"], p["k"], "fp8")
        op = O.Op(op.name, op.kind, op.phase, op.flops, op.bytes, {**op.params, "scaling": "block"})
        price = time_op(op, hw, prof, standalone=True).time
        groups.setdefault((layer, product), []).append((extra / v["dense"]["time_s"], price / extra))
    return [{"layer": layer, "product": product, "counts": len(xs), "share": statistics.median(x for x, _ in xs),
             "priced": statistics.median(y for _, y in xs), "part": hw.name} for (layer, product), xs in groups.items()]


def markdown(folder: Path = FOLDER) -> str:
    rows = compare(folder)
    head = ["| layer | product | token counts | (padded - routed) / dense | projection's price / (padded - routed) |",
            "|---|---|---|---|---|"]
    body = [f"| {r['layer']} | {r['product']} | {r['counts']} | {r['share']:.2f} | {r['priced']:.2f} |" for r in rows]
    shares = [r["share"] for r in rows]
    tail = [f"\nMedian over the {len(rows)} layer products: padding share {statistics.median(shares):.2f} "
            f"(measured on the {rows[0]['part'] if rows else '?'})."]
    return "\n".join(head + body + tail)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--folder", type=Path, default=FOLDER)
    args = ap.parse_args(argv)
    print(markdown(args.folder))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
