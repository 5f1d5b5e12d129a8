#!/bin/bash
# Output-length dependence of the API server's per-step CPU (one repetition):
# every request has already streamed H tokens before the 20 warm-up + 50 timed steps.
#   base_start / base_end : H=0 (same harness, same session), before and after the length runs
#   hist{H}_tok           : history delivered token by token (H un-timed decode steps, --hist-chunk 1)
#   hist{H}_one           : history delivered as ONE multi-token EngineCoreOutput per request
#                           (--hist-chunk 0), to check the cheap shortcut against the token-by-token path
#   interleaved           : ONE process; for each B, H = 0 4000 1000 0 1000 4000 0 4000 1000 (3 points
#                           per H, history in one step), to separate the length effect from
#                           process-to-process variation (added after the first six runs showed
#                           base_start and base_end differing by 10-15 %)
# usage: ./run_length.sh [all|main|interleaved|interleaved2]   (default all)
# One API-server process per run, B = 256 then 1024 in it. Before each point, and before the timed
# steps of a point with H>0, the harness waits until the 1-min load average is <= 1.5 (--max-load).
# Every run holds /tmp/engine-host-measure.lock (shared with the other measurements on this machine).
# Needs the venv (VENV, default /tmp/fe-vllm/venv) and /tmp/fe-vllm/model_qwen3moe (make_model_dir.py).
set -u
cd "$(dirname "$0")"
VENV=${VENV:-/tmp/fe-vllm/venv}
OUT=${OUT:-runs_length}
BS=${BS:-"256 1024"}
mkdir -p "$OUT" /tmp/fe-vllm
port=18300
run() {   # name, extra harness args
  local name=$1; shift
  port=$((port+1))
  echo "$name start $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
  flock /tmp/engine-host-measure.lock \
    "$VENV/bin/python" harness.py --bs $BS --warmup 20 --steps 50 --port $port --max-load 1.5 \
      --tag "$name" --out "$OUT/$name.json" "$@" \
      > "/tmp/fe-vllm/server_len_$name.log" 2> >(grep --line-buffered '^\[' >&2)
}
what=${1:-all}
if [ "$what" = all ] || [ "$what" = main ]; then
  run base_start   --hist 0
  run hist1000_tok --hist 1000 --hist-chunk 1
  run hist4000_tok --hist 4000 --hist-chunk 1
  run hist4000_one --hist 4000 --hist-chunk 0
  run hist1000_one --hist 1000 --hist-chunk 0
  run base_end     --hist 0
fi
if [ "$what" = all ] || [ "$what" = interleaved ]; then
  run interleaved  --hist-seq 0 4000 1000 0 1000 4000 0 4000 1000 --hist-chunk 0
fi
# replication in another order, with per-step sys CPU / minor faults; then component timers (B=1024)
if [ "$what" = all ] || [ "$what" = interleaved2 ]; then
  run interleaved_b --hist-seq 4000 1000 0 0 1000 4000 4000 0 1000 --hist-chunk 0 --rusage-detail
  BS=1024 run interleaved_comp --hist-seq 0 4000 0 4000 --hist-chunk 0 --rusage-detail --components
fi
echo "end $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
