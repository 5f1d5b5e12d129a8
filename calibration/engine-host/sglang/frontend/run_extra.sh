#!/bin/bash
# Extras, one repetition each (called at the end of run_all.sh):
#  1. loopback socket.send micro-benchmark (sockbench.py)
#  2. cProfile of the HTTP-server process at B=1024 (runs/profile_B1024.txt; profiled timings are not used)
#  3. output-length dependence: requests that already streamed HIST tokens before the timed steps (steps.py hist=)
cd "$(dirname "$0")" && . /tmp/fe-sglang/venv/bin/activate
export PYTHONDONTWRITEBYTECODE=1
mkdir -p runs /tmp/fe-sglang/logs
echo "== sockbench $(cat /proc/loadavg)"
flock /tmp/engine-host-measure.lock python sockbench.py runs/sockbench.json
echo "== profile B=1024 $(cat /proc/loadavg)"
flock /tmp/engine-host-measure.lock bash -c "
  python server.py --B 1024 --port 30777 --http h11 --warmup 20 --steps 30 --profile runs/profile_B1024.txt \
      --out /tmp/fe-sglang/profile_B1024.json > /tmp/fe-sglang/logs/profile.srv.log 2>&1 &
  spid=\$!
  python client.py --B 1024 --port 30777 > /tmp/fe-sglang/logs/profile.cli.log 2>&1
  wait \$spid"
grep -h "^B=" /tmp/fe-sglang/logs/profile.srv.log
for H in 1000 4000; do
  echo "== hist=$H detok $(cat /proc/loadavg)"
  flock /tmp/engine-host-measure.lock python detok.py --bs 256 1024 --hist $H --warmup 20 --steps 50 \
      --out runs/detok_hist${H}_rep1.json 2>&1 | grep "^B="
  for B in 256 1024; do
    echo "== hist=$H http B=$B $(cat /proc/loadavg)"
    port=$((30800 + RANDOM % 500))
    flock /tmp/engine-host-measure.lock bash -c "
      python server.py --B $B --port $port --http h11 --hist $H --warmup 20 --steps 50 --out runs/hist${H}_rep1_B$B.json \
          > /tmp/fe-sglang/logs/hist${H}_B$B.srv.log 2>&1 &
      spid=\$!
      python client.py --B $B --port $port --out runs/hist${H}_rep1_B$B.client.json > /tmp/fe-sglang/logs/hist${H}_B$B.cli.log 2>&1
      wait \$spid"
    grep -h "^B=" /tmp/fe-sglang/logs/hist${H}_B$B.srv.log
  done
done
# client's own CPU cost at B=2048 (cpu_connect_s / cpu_drain_s in runs/client_cost_B2048.json)
flock /tmp/engine-host-measure.lock bash -c "
  python server.py --B 2048 --port 31999 --http h11 --warmup 20 --steps 50 --out /tmp/fe-sglang/clientcost_srv.json \
      > /tmp/fe-sglang/logs/clientcost.srv.log 2>&1 &
  spid=\$!
  python client.py --B 2048 --port 31999 --out runs/client_cost_B2048.json
  wait \$spid"
