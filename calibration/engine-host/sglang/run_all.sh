#!/bin/bash
cd /tmp/sglang-host && . venv/bin/activate
for rep in 1 2 3; do
  for mode in overlap normal; do
    echo "== $mode rep$rep $(cat /proc/loadavg)"
    python harness.py --mode $mode --steps 50 --warmup 20 --out runs/${mode}_rep$rep.json 2>&1 | grep -E "^B=|Error|error"
  done
done
