#!/bin/bash
# 3 repetitions x {plain, components} sweeps over B, one API-server process per sweep.
# Every timed sweep holds /tmp/engine-host-measure.lock (shared with the SGLang measurement),
# so no two measurements overlap on this 2-core machine.
# Needs: the venv (VENV, default /tmp/fe-vllm/venv) with vllm 0.19.0 --no-deps + CPU torch,
# and the model dir from make_model_dir.py (/tmp/fe-vllm/model_qwen3moe).
set -u
cd "$(dirname "$0")"
VENV=${VENV:-/tmp/fe-vllm/venv}
OUT=${OUT:-runs}
BS=${BS:-"1 8 64 256 512 1024 2048"}
mkdir -p "$OUT"
port=18100
for rep in 1 2 3; do
  for mode in plain comp; do
    port=$((port+1))
    extra=""; [ "$mode" = comp ] && extra="--components"
    echo "rep$rep $mode start $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
    flock /tmp/engine-host-measure.lock \
      "$VENV/bin/python" harness.py --bs $BS --warmup 20 --steps 50 --port $port \
        --tag "${mode}_rep$rep" --out "$OUT/${mode}_rep$rep.json" $extra \
        > "/tmp/fe-vllm/server_${mode}_rep$rep.log" 2> >(grep --line-buffered '^\[' >&2)
  done
done
echo "end $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
