#!/bin/bash
# Diagnostics (one repetition each, every one under the shared measurement lock):
#  gcoff     : same plain sweep with gc.disable() after startup (the real server keeps GC on)
#  extralayer: plain sweep with one more pure-ASGI pass-through layer (fe_mw.PassThroughMiddleware)
#              -> estimates what the counting layer itself adds per chunk
#  gctiming  : plain sweep (B>=256) with only the gc.callbacks pause timer installed
#  gcab      : B=1024/2048, 200 timed steps, GC on/off alternating every 25 steps in one process
#  pyspy     : py-spy (Python frames only, --nonblocking, 100 Hz) over a B=2048 run with 400 timed
#              steps -> collapsed stacks (a first try with --native stopped the process at every
#              sample and starved it; it was killed and is not used)
set -u
STAGES=${STAGES:-"gcoff extralayer gctiming gcab pyspy"}
cd "$(dirname "$0")"
VENV=${VENV:-/tmp/fe-vllm/venv}
OUT=${OUT:-runs_diag}
mkdir -p "$OUT"
L=/tmp/engine-host-measure.lock
if [[ " $STAGES " == *" gcoff "* ]]; then
echo "gcoff $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
flock $L "$VENV/bin/python" harness.py --warmup 20 --steps 50 --port 18201 --gc-off \
  --tag gcoff --out "$OUT/plain_gcoff.json" > /tmp/fe-vllm/server_gcoff.log 2> >(grep --line-buffered '^\[' >&2)
fi
if [[ " $STAGES " == *" extralayer "* ]]; then
echo "extralayer $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
flock $L "$VENV/bin/python" harness.py --warmup 20 --steps 50 --port 18202 \
  --extra-serve-args "--middleware fe_mw.PassThroughMiddleware" \
  --tag extralayer --out "$OUT/plain_extralayer.json" > /tmp/fe-vllm/server_extralayer.log 2>/tmp/fe-vllm/server_extralayer.err
fi
if [[ " $STAGES " == *" gctiming "* ]]; then
echo "gctiming $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
flock $L "$VENV/bin/python" harness.py --bs 256 512 1024 2048 --warmup 20 --steps 50 --port 18204 \
  --gc-timing --tag gctiming --out "$OUT/plain_gctiming.json" > /tmp/fe-vllm/server_gctiming.log 2>/tmp/fe-vllm/server_gctiming.err
fi
if [[ " $STAGES " == *" gcab "* ]]; then
echo "gcab $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
flock $L "$VENV/bin/python" harness.py --bs 1024 2048 --warmup 20 --steps 200 --port 18205 \
  --gc-ab --gc-timing --tag gcab --out "$OUT/plain_gcab.json" > /tmp/fe-vllm/server_gcab.log 2>/tmp/fe-vllm/server_gcab.err
fi
if [[ " $STAGES " == *" pyspy "* ]]; then
echo "pyspy $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
flock $L "$VENV/bin/py-spy" record --nonblocking -r 100 -f raw -o /tmp/fe-vllm/pyspy_2048.txt -- \
  "$VENV/bin/python" harness.py --bs 2048 --warmup 20 --steps 400 --port 18203 \
  --tag pyspy --out "$OUT/pyspy_run.json" > /tmp/fe-vllm/server_pyspy.log 2> >(grep --line-buffered '^\[' >&2)
fi
echo "end $(date -u +%H:%M:%S) load $(cat /proc/loadavg)"
