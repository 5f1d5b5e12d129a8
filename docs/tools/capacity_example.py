"""The worked example of docs/capacity.md: Llama-3.1-70B at 20 requests/s under 2 s TTFT / 50 ms TPOT across the
H200 and the B200, planned for TensorRT-LLM, and the launch files `perfmodel deploy` writes for the chosen plan
(all three engines) and for the best mixed-part plan.

    python docs/tools/capacity_example.py      # prints the block
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import tempfile
from pathlib import Path

PLAN = ["plan", "--arch", "h200-sxm,b200", "--model", "llama-3.1-70b", "--rate", "20", "--slo-ttft-ms", "2000",
        "--slo-tpot-ms", "50", "--engine", "trtllm"]


def _cli(args) -> str:
    from perfmodel.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        rc = main(list(args))
    if rc != 0:
        raise SystemExit(f"perfmodel {' '.join(args)} exited {rc}")
    return buf.getvalue()


def _commands(folder: Path) -> list[str]:
    """The command lines of the scripts, one a line (continuations joined), without the comments."""
    out = []
    for name in ("serve.sh", "prefill.sh", "decode.sh", "router.sh"):
        p = folder / name
        if not p.exists():
            continue
        text = p.read_text().replace("\\\n", " ")
        out.append(f"# {name}")
        for line in text.splitlines():
            if line.strip() and not line.startswith(("#", "set ", "cd ", "wait")):
                out.append(re.sub(r"\s+", " ", line).strip())
    return out


def example() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "plan.json"
        _cli(PLAN + ["--format", "json", "--out", str(plan)])
        doc = json.loads(plan.read_text())
        from perfmodel.serve.capacity_report import capacity_table

        table = re.sub(r"; [0-9.]+ s\n", "\n", capacity_table(doc) + "\n")  # the search's wall time varies
        lines = ["$ perfmodel " + " ".join(PLAN), *table.rstrip().splitlines()[:-1], ""]
        chosen = doc["chosen"]
        lines.append(f"chosen (rank 1): {chosen['describe']}, {chosen['gpus']} GPUs; simulated end to end at "
                     f"{chosen['rate_req_s']:g} req/s over {chosen['simulated_requests']} requests: "
                     f"{100 * chosen['attainment']:.1f}% within both SLOs, TTFT p90 {chosen['ttft_p90_ms']:.0f} ms, "
                     f"TPOT p90 {chosen['tpot_p90_ms']:.1f} ms, {chosen['joules_per_token']:.2f} J per output token")
        mixed = next((r for r in doc["candidates"] if r.get("mixed_parts")), None)
        for engine in ("trtllm", "vllm", "sglang"):
            out = Path(tmp) / engine
            _cli(["deploy", str(plan), "--engine", engine, "--rank", "1", "--out", str(out)])
            lines += ["", f"$ perfmodel deploy plan.json --engine {engine} --rank 1 --out {engine}/", *_commands(out)]
        if mixed is not None:
            out = Path(tmp) / "mixed"
            _cli(["deploy", str(plan), "--engine", "trtllm", "--rank", str(mixed["rank"]), "--out", str(out)])
            kv = mixed["kv_transfer"]
            lines += ["", f"best mixed-part plan (rank {mixed['rank']}): {mixed['describe']}, {mixed['gpus']} GPUs, "
                      f"{100 * mixed['attainment']:.1f}% within the SLOs; KV cache {kv['bytes_per_request'] / 1e6:.0f} MB "
                      f"a request over the {kv['link']} ({kv['mean_ms']:.1f} ms mean, {kv['gb_s_at_rate']:.1f} GB/s "
                      "at the rate)",
                      f"$ perfmodel deploy plan.json --engine trtllm --rank {mixed['rank']} --out mixed/",
                      *_commands(out)]
    return "```\n" + "\n".join(lines) + "\n```"


if __name__ == "__main__":
    sys.stdout.write(example() + "\n")
