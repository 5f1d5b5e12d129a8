#!/bin/bash
# Full sweep. Every timed run holds /tmp/engine-host-measure.lock (shared with the vLLM measurement).
# Venv: /tmp/fe-sglang/venv (see REPORT.md "Environment"); model dir: /tmp/fe-sglang/model (make_model.py).
cd "$(dirname "$0")" && . /tmp/fe-sglang/venv/bin/activate
export PYTHONDONTWRITEBYTECODE=1
BS="1 8 64 256 512 1024 2048"
WARM=20; STEPS=50
one() {  # $1=B $2=http $3=tag $4=extra server flags
  local B=$1 port=$((30200 + RANDOM % 500))
  python server.py --B $B --port $port --http $2 --warmup $WARM --steps $STEPS $4 --out runs/$3_B$B.json \
      > /tmp/fe-sglang/logs/$3_B$B.srv.log 2>&1 &
  local spid=$!
  python client.py --B $B --port $port --out runs/$3_B$B.client.json > /tmp/fe-sglang/logs/$3_B$B.cli.log 2>&1
  wait $spid
  grep -h "^B=" /tmp/fe-sglang/logs/$3_B$B.srv.log; grep -h -o '"open_at_end": [0-9]*, "total_bytes": [0-9]*' /tmp/fe-sglang/logs/$3_B$B.cli.log
}
sweep() {  # $1=http $2=tag $3=extra
  for B in $BS; do one $B $1 $2 "$3"; done
}
mkdir -p runs /tmp/fe-sglang/logs
for rep in 1 2 3; do
  echo "== rep$rep detok $(cat /proc/loadavg)"
  flock /tmp/engine-host-measure.lock python detok.py --warmup $WARM --steps $STEPS --out runs/detok_rep$rep.json 2>&1 | grep "^B="
  echo "== rep$rep http (h11 = uvicorn auto in a plain sglang 0.5.9 install) $(cat /proc/loadavg)"
  flock /tmp/engine-host-measure.lock bash -c "$(declare -f one sweep); BS='$BS'; WARM=$WARM; STEPS=$STEPS; sweep h11 http_rep$rep ''"
done
echo "== components (instrumented, h11) $(cat /proc/loadavg)"
flock /tmp/engine-host-measure.lock bash -c "$(declare -f one sweep); BS='$BS'; WARM=$WARM; STEPS=$STEPS; sweep h11 comp_rep1 --components"
echo "== variant: httptools $(cat /proc/loadavg)"
flock /tmp/engine-host-measure.lock bash -c "$(declare -f one sweep); BS='$BS'; WARM=$WARM; STEPS=$STEPS; sweep httptools httptools_rep1 ''"
echo "== variant: gc.freeze after setup (as POST /freeze_gc) $(cat /proc/loadavg)"
flock /tmp/engine-host-measure.lock bash -c "$(declare -f one sweep); BS='$BS'; WARM=$WARM; STEPS=$STEPS; sweep h11 gcfreeze_rep1 --gc-freeze"
echo "== done $(cat /proc/loadavg)"
# extras (one repetition each): loopback send micro-benchmark, cProfile at B=1024, output-length dependence
./run_extra.sh
# component split with gc frozen
./run_extra2.sh
/tmp/fe-sglang/venv/bin/python analyze.py
