#!/bin/bash
# 3 repetitions x {sync, async}, sequential (one core's worth of work at a time)
cd /tmp/vllm-host
for rep in 1 2 3; do for m in sync async; do
  echo "rep$rep $m start load $(cat /proc/loadavg)"
  ./venv/bin/python harness.py --mode $m --steps 50 --warmup 20 --out runs/${m}_rep$rep.json 2>&1 | grep "^\["
done; done
echo "end load $(cat /proc/loadavg)"
