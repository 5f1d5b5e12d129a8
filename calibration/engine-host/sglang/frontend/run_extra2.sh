#!/bin/bash
# Component split with gc.freeze() after setup (so GC pauses don't land inside whichever component allocates),
# one repetition. Called at the end of run_all.sh.
cd "$(dirname "$0")" && . /tmp/fe-sglang/venv/bin/activate
export PYTHONDONTWRITEBYTECODE=1
mkdir -p runs /tmp/fe-sglang/logs
for B in 1 8 64 256 512 1024 2048; do
  port=$((31400 + RANDOM % 500))
  flock /tmp/engine-host-measure.lock bash -c "
    python server.py --B $B --port $port --http h11 --components --gc-freeze --warmup 20 --steps 50 \
        --out runs/compgcf_rep1_B$B.json > /tmp/fe-sglang/logs/compgcf_B$B.srv.log 2>&1 &
    spid=\$!
    python client.py --B $B --port $port --out runs/compgcf_rep1_B$B.client.json > /tmp/fe-sglang/logs/compgcf_B$B.cli.log 2>&1
    wait \$spid"
  grep -h "^B=" /tmp/fe-sglang/logs/compgcf_B$B.srv.log
done
