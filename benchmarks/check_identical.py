"""Bit-identity of the tool's answers across a change that should not move them (a speed change, a refactor).

    python benchmarks/check_identical.py [--out FILE] [--compare FILE] [--fresh] [--only SUBSTRING]

Runs a fixed list of commands (``project``/``step`` as JSON, ``sweep`` as CSV, ``serve`` and ``plan`` as JSON with
few requests) through the CLI and prints one SHA-256 per command of its output, with the repository's path and the
wall-clock fields (``simulation.build_s``, ``simulate_s``) taken out. Run it on the commit before and the commit after
and compare (``--out`` writes the hashes, ``--compare`` reads a file of them and exits 1 on any difference).

Under ``PYTHONHASHSEED=0`` (it re-runs itself so): some outputs list a set, whose order follows string hashing. In
one process by default, one command after another: the caches a command leaves behind meet the next one (a
what-if spec after its parent, the same part under two engines), which is what a cache that leaks would break.
``--fresh`` runs each command in a process of its own instead (no cache survives between commands).
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# what-if specs written to a temporary folder: {name} is replaced by the file's path
WHAT_IF = {
    "h200-2x": "extends: h200-sxm\nname: H200 with 2x HBM\n"
               "memory:\n  bandwidth: {value: 9.6 TB/s, source: estimate, note: what-if}\n",
    # the same name as the part it extends, other figures: must not hit a cache of the part
    "h200-samename": "extends: h200-sxm\nname: NVIDIA H200 SXM 141GB\n"
                     "memory:\n  bandwidth: {value: 6.2 TB/s, source: estimate}\n",
    "b200-renamed": "extends: b200\nname: Somebody's B200\n",
    # the library part's very key and name (a file h200-sxm.yaml elsewhere), another bandwidth
    "same/h200-sxm": "extends: h200-sxm\nname: NVIDIA H200 SXM 141GB\n"
                     "memory:\n  bandwidth: {value: 6.2 TB/s, source: estimate}\n",
}

# calibration profiles derived from a shipped one: {name} is replaced by the profile's path. A clock exponent other
# than 2 makes numpy's vectorised pow and the C library's differ in the last bit for some demands
PROFILES = {
    "alpha23": ("calibration/h200/profile.json", {"alpha": 2.22}),  # 1.44 ** (1 / 2.22) differs so
}

P = ["project", "--format", "json"]
S = ["step", "--format", "json"]
SERVE = ["serve", "--format", "json", "--requests", "60", "--seed", "3"]
PLAN = ["plan", "--format", "json", "--requests", "60", "--tp-options", "2,4,8", "--batch-options", "32,max"]

CASES: list[tuple[str, list[str]]] = [
    ("h200-70b-tp8", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8"]),
    ("h200-70b-tp8-again", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8"]),
    ("b200-70b", P + ["--arch", "blackwell.yaml", "--model", "llama70b"]),
    ("b200-70b-fp8-max", P + ["--arch", "b200", "--model", "llama70b", "--tp", "2", "--dtype", "fp8", "--batch", "max"]),
    ("b200-70b-fp4-tp4", P + ["--arch", "b200", "--model", "llama70b", "--tp", "4", "--dtype", "fp4", "--batch", "64"]),
    ("h100-8b-vllm", P + ["--arch", "h100-sxm", "--model", "llama-3.1-8b", "--engine", "vllm", "--batch", "32"]),
    ("h100-8b-sglang", P + ["--arch", "h100-sxm", "--model", "llama-3.1-8b", "--engine", "sglang", "--batch", "32"]),
    ("h100-8b-torch", P + ["--arch", "h100-sxm", "--model", "llama-3.1-8b", "--engine", "torch", "--batch", "4"]),
    ("h200-8b-hf", P + ["--arch", "h200-sxm", "--model", "llama-3.1-8b", "--engine", "hf", "--batch", "8"]),
    ("h200-8b-hf-static", P + ["--arch", "h200-sxm", "--model", "llama-3.1-8b", "--engine", "hf", "--kv-cache", "static"]),
    ("h200-70b-overlap", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--overlap", "fused",
                              "--batch", "64"]),
    ("h200-70b-overlap-fixed", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "4", "--overlap", "0.3"]),
    ("h200-70b-pp", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "2", "--pp", "2", "--batch", "16"]),
    ("h200-70b-sol", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--mode", "sol"]),
    ("h200-70b-static", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--batching", "static",
                             "--batch", "8"]),
    ("h200-70b-nocal", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--calibration", "none"]),
    ("h200-70b-h200cal", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--calibration",
                              "calibration/h200"]),
    ("h200-70b-long", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--isl", "8000",
                           "--osl", "2000", "--batch", "max"]),
    ("h200-70b-osl2", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--osl", "2", "--batch", "8"]),
    ("h200-70b-osl3-sol", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--osl", "3",
                               "--mode", "sol"]),
    ("h200-8b-hf-osl2", P + ["--arch", "h200-sxm", "--model", "llama-3.1-8b", "--engine", "hf", "--osl", "2"]),
    ("h200-70b-fp8kv", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--dtype", "fp8",
                            "--kv-dtype", "fp8", "--batch", "128"]),
    ("h200-dsv3-tp8", P + ["--arch", "h200-sxm", "--model", "deepseek-v3", "--tp", "8", "--ep", "8", "--dtype", "fp8",
                           "--batch", "32"]),
    ("b200-dsv3-dep", P + ["--arch", "b200", "--model", "deepseek-v3", "--tp", "1", "--attention-dp", "8", "--ep", "8",
                           "--dtype", "fp8", "--batch", "256"]),
    ("b200-dsv3-a2a", P + ["--arch", "b200", "--model", "deepseek-v3", "--tp", "1", "--attention-dp", "8", "--ep", "8",
                           "--dtype", "fp8", "--batch", "256", "--moe-exchange", "all_to_all",
                           "--moe-imbalance", "1.3"]),
    ("b200-dsv3-mtp", P + ["--arch", "b200", "--model", "deepseek-v3", "--tp", "8", "--ep", "8", "--dtype", "fp8",
                           "--mtp", "2", "--mtp-accept", "0.8,0.6"]),
    ("b300-dsv3-fp4", P + ["--arch", "b300", "--model", "deepseek-v3", "--tp", "8", "--ep", "8", "--dtype", "fp4",
                           "--batch", "64"]),
    ("gb300-dsv3-fp4", P + ["--arch", "gb300", "--model", "deepseek-v3", "--tp", "8", "--ep", "8", "--dtype", "fp4"]),
    ("h200-mixtral-fp8", P + ["--arch", "h200-sxm", "--model", "mixtral", "--tp", "2", "--dtype", "fp8",
                              "--batch", "8"]),
    ("b200-gptoss", P + ["--arch", "b200", "--model", "gpt-oss-120b", "--batch", "16"]),
    ("h200-gemma3", P + ["--arch", "h200-sxm", "--model", "gemma-3-27b", "--batch", "16", "--isl", "4096"]),
    ("h200-qwen3next", P + ["--arch", "h200-sxm", "--model", "qwen3-next-80b-a3b", "--tp", "4", "--batch", "16"]),
    ("h200-qwen3-moe", P + ["--arch", "h200-sxm", "--model", "qwen3-235b-a22b", "--tp", "8", "--ep", "8", "--batch",
                            "64"]),
    ("h200-dsv32", P + ["--arch", "h200-sxm", "--model", "deepseek-v3.2", "--tp", "8", "--dtype", "fp8"]),
    ("h200-70b-draft", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--mtp", "3",
                            "--draft", "llama-3.1-8b", "--mtp-accept", "0.7"]),
    ("mi300x-70b", P + ["--arch", "mi300x", "--model", "llama-3.1-70b", "--tp", "2", "--batch", "32"]),
    ("l40s-8b", P + ["--arch", "l40s", "--model", "llama-3.1-8b", "--batch", "8"]),
    ("gb200-405b", P + ["--arch", "gb200", "--model", "llama-3.1-405b", "--tp", "8", "--dtype", "fp8", "--batch",
                        "max"]),
    ("rubin-70b", P + ["--arch", "rubin-estimate", "--model", "llama70b", "--dtype", "fp4"]),
    ("two-arch", P + ["--arch", "h100-sxm", "--arch", "h200-sxm", "--model", "llama-3.1-8b", "--batch", "64"]),
    ("whatif-2x", P + ["--arch", "{h200-2x}", "--model", "llama-3.1-8b", "--batch", "16"]),
    ("whatif-samename", P + ["--arch", "{h200-samename}", "--model", "llama-3.1-70b", "--tp", "8"]),
    ("h200-70b-after-whatif", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8"]),
    ("whatif-samekey", P + ["--arch", "{same/h200-sxm}", "--model", "llama-3.1-70b", "--tp", "8"]),
    ("h200-70b-after-samekey", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8"]),
    ("whatif-renamed", P + ["--arch", "{b200-renamed}", "--model", "mixtral", "--tp", "2", "--dtype", "fp8",
                            "--batch", "8"]),
    ("h200-70b-alpha23", P + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--calibration",
                               "{alpha23}", "--batch", "32"]),
    ("step-decode", S + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--phase", "decode",
                         "--batch", "64", "--context", "4096"]),
    ("step-prefill-trtllm", S + ["--arch", "b200", "--model", "deepseek-v3", "--tp", "8", "--ep", "8", "--dtype",
                                 "fp8", "--phase", "prefill", "--batch", "2", "--seq", "2048", "--engine", "trtllm"]),
    ("sweep", ["sweep", "--arch", "b200", "--arch", "h200-sxm", "--model", "llama70b", "--tp", "2",
               "--vary", "hbm_bandwidth=4TB/s:12TB/s:5", "--vary", "batch=1,8,64,max"]),
    ("sweep-isl", ["sweep", "--arch", "h200-sxm", "--model", "mixtral", "--tp", "2", "--vary", "isl=128,1024,8192",
                   "--vary", "batch=1,32"]),
    ("serve", SERVE + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--rate", "4"]),
    ("serve-disagg", SERVE + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--disagg", "2p1d", "--prefill-tp",
                              "2", "--decode-tp", "4", "--rate", "3", "--isl-dist", "uniform:500:3000"]),
    ("serve-prefix", SERVE + ["--arch", "h200-sxm", "--model", "llama-3.1-8b", "--rate", "20", "--prefix-cache",
                              "--prefix-len", "512", "--prefix-groups", "4"]),
    ("serve-preempt", SERVE + ["--arch", "l40s", "--model", "llama-3.1-8b", "--rate", "30", "--isl-dist",
                               "uniform:2000:6000", "--osl-dist", "uniform:500:2000", "--batch", "256"]),
    ("serve-closed", SERVE + ["--arch", "h100-sxm", "--model", "llama-3.1-8b", "--concurrency", "16"]),
    ("serve-pp", SERVE + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "2", "--pp", "2", "--rate", "2"]),
    ("serve-vllm-moe", SERVE + ["--arch", "h200-sxm", "--model", "mixtral", "--tp", "2", "--engine", "vllm",
                                "--rate", "6"]),
    ("serve-overlap", SERVE + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--rate", "4",
                               "--overlap", "stream"]),
    ("serve-fixed", SERVE + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "8", "--rate", "4",
                             "--overlap", "0.4"]),
    ("serve-sol", SERVE + ["--arch", "b200", "--model", "llama-3.1-8b", "--rate", "10", "--mode", "sol"]),
    ("serve-alpha23", SERVE + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--tp", "4", "--rate", "3",
                               "--calibration", "{alpha23}"]),
    ("train-8b", ["train", "--format", "json", "--arch", "h200-sxm", "--model", "llama-3.1-8b", "--gpus", "8", "--tp", "2",
                  "--global-batch", "64", "--seq", "4096"]),
    ("train-70b-fp8", ["train", "--format", "json", "--arch", "b200", "--model", "llama-3.1-70b", "--gpus", "64",
                       "--tp", "8", "--pp", "4", "--global-batch", "256", "--seq", "8192", "--dtype", "fp8",
                       "--fp8-recipe", "block"]),
    ("train-moe-search", ["train", "--format", "json", "--arch", "h100-sxm", "--model", "mixtral", "--gpus", "16",
                          "--global-batch", "128", "--seq", "4096", "--search", "--top", "3"]),
    ("export-csv", ["export", "--format", "csv", "--arch", "b200", "--model", "llama-3.1-8b", "--batch", "8",
                    "--out", "{out}/w.csv"]),
    ("plan", PLAN + ["--arch", "h200-sxm", "--model", "llama-3.1-70b", "--gpus", "8", "--slo-ttft-ms", "2000",
                     "--slo-tpot-ms", "50"]),
]


def _clean(obj):
    """Wall-clock fields out (they differ run to run)."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items() if k not in ("build_s", "simulate_s")}
    if isinstance(obj, list):
        return [_clean(v) for v in obj]
    return obj


def _normal(text: str, tmp: str) -> str:
    text = text.replace(str(ROOT), "<root>").replace(tmp, "<tmp>")
    try:
        return json.dumps(_clean(json.loads(text)), sort_keys=True)
    except ValueError:
        return text


def _argv(args: list[str], tmp: Path, out: Path) -> list[str]:
    def path(name: str) -> str:
        return str(tmp / name / "profile.json") if name in PROFILES else str(tmp / f"{name}.yaml")

    return [a.replace("{out}", str(out)) if "{out}" in a else path(a[1:-1]) if a.startswith("{") else a for a in args]


def _written(out: Path) -> str:
    """The text files a command wrote under ``out`` (``{out}`` in its arguments), in name order."""
    return "".join(f"\n--- {p.name}\n{p.read_text()}" for p in sorted(out.glob("*")) if p.is_file())


def run_case(args: list[str], tmp: Path, fresh: bool) -> str:
    if fresh:
        r = subprocess.run([sys.executable, "-m", "perfmodel", *args], cwd=ROOT, capture_output=True, text=True)
        out, rc = r.stdout + r.stderr, r.returncode
    else:
        from perfmodel.cli import main

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            rc = main(args)
        out = buf.getvalue()
    return f"rc={rc}\n" + _normal(out, str(tmp))


def main() -> int:
    if os.environ.get("PYTHONHASHSEED") != "0":  # string hashing fixed: an output listing a set is in one order
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="write 'hash name' lines here")
    ap.add_argument("--compare", help="a file of 'hash name' lines to compare against (exit 1 on a difference)")
    ap.add_argument("--fresh", action="store_true", help="each command in a process of its own")
    ap.add_argument("--only", help="only the cases whose name contains this")
    ap.add_argument("--dump", help="write each case's normalised output to this folder")
    a = ap.parse_args()
    os.chdir(ROOT)
    lines = []
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, text in WHAT_IF.items():
            (tmp / f"{name}.yaml").parent.mkdir(parents=True, exist_ok=True)
            (tmp / f"{name}.yaml").write_text(text)
        for name, (src, clock) in PROFILES.items():
            data = json.loads((ROOT / src).read_text())
            data["power"]["clock"].update(clock)
            (tmp / name).mkdir()
            (tmp / name / "profile.json").write_text(json.dumps(data))
        for name, args in CASES:
            if a.only and a.only not in name:
                continue
            written = tmp / f"out-{name}"
            written.mkdir()
            out = run_case(_argv(args, tmp, written), tmp, a.fresh)
            out = out + _written(written).replace(str(written), "<out>")
            if a.dump:
                Path(a.dump).mkdir(parents=True, exist_ok=True)
                (Path(a.dump) / f"{name}.txt").write_text(out)
            line = f"{hashlib.sha256(out.encode()).hexdigest()[:16]} {name}"
            print(line, flush=True)
            lines.append(line)
    if a.out:
        Path(a.out).write_text("\n".join(lines) + "\n")
    if a.compare:
        want = dict(reversed(line.split(" ", 1)) for line in Path(a.compare).read_text().split("\n") if line)
        got = dict(reversed(line.split(" ", 1)) for line in lines)
        bad = [n for n in got if want.get(n) != got[n]]
        print(f"{len(got) - len(bad)} of {len(got)} identical" + (f"; differ: {', '.join(bad)}" if bad else ""))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
