#!/usr/bin/env bash
# The agent benchmark of issue 15 on the lent H200 (device), in one command: the live-NVML run (the GPUs the
# machine has) and the fake 8-GPU run with the H200's call costs, each next to its bare nvidia-ml-py loop,
# through bench/agent_overhead.py. JSONs (and the agents' stderr) go to $OUT.
#
#   bash bench/device_agent.sh [SECONDS]      # default 180 s windows; about 8 minutes in all
#
# Then (EVENT_LATENCY=0 skips it) bench/event_latency.py as root: kernel-log XID -> alert, 3 rounds of the fake
# source's 8 GPUs and 6 rounds of the live GPUs, next to a bare /dev/kmsg reader.
#
# The device image has Python 3.12 with numpy, pyarrow, nvidia-ml-py, prometheus-client, pyyaml, rich and
# typer but no duckdb (and not typer 0.29's pydantic): what is missing comes from the carried .whl folder
# (run with carry [".whl"]). fleettool itself runs from this tree, laid out as setuptools installs it
# (fleettool.collectors = collectors/, fleettool.tui = tui/, fleettool.rules = rules/,
# fleettool.runbooks = runbooks/), unless the Python already imports it.
# Both benches run at the same time (each measures its own processes; 16 cores): first both stores are made
# (a 65 s template run of the agent, then DuckDB generates 7 days), then both measured windows.
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/agent-bench-out}
WIN=${1:-180}
PY=${PYTHON:-python3}
CACHE=${CACHE:-/tmp/fleettool-bench-cache}
SITE=${SITE:-/tmp/site}
mkdir -p "$OUT"
LOG=$OUT/device_agent.log
exec > >(tee -a "$LOG") 2>&1
export PYTHONUNBUFFERED=1
echo "== device_agent.sh $(date -u +%FT%TZ) window ${WIN}s, $($PY --version 2>&1), $(nproc) cores"

NEEDS='import duckdb, numpy, pyarrow, prometheus_client, yaml, typer, pynvml
from typer._click import exceptions'
if ! $PY -c "$NEEDS" 2>/dev/null; then
  if ! ls "$REPO"/.whl/*.whl >/dev/null 2>&1; then
    echo "missing packages and no .whl folder: carry .whl (see bench/README.md)"; exit 1
  fi
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$REPO"/.whl/*.whl || exit 1
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
  $PY -c "$NEEDS" || exit 1
fi
if ! (cd / && $PY -c 'import fleettool.collectors, fleettool.rules, fleettool.cli' 2>/dev/null); then
  SRC=/tmp/fleettool-src
  rm -rf "$SRC" && mkdir -p "$SRC/fleettool"
  for f in "$REPO"/fleettool/*; do ln -s "$f" "$SRC/fleettool/"; done
  for d in collectors tui rules runbooks; do ln -s "$REPO/$d" "$SRC/fleettool/$d"; done
  export PYTHONPATH=$SRC${PYTHONPATH:+:$PYTHONPATH}
fi
(cd / && $PY -c 'import fleettool, duckdb, pyarrow, numpy, typer, pynvml
print("fleettool from", fleettool.__file__, "| duckdb", duckdb.__version__, "| pyarrow", pyarrow.__version__,
      "| numpy", numpy.__version__, "| typer", typer.__version__)') || exit 1
nvidia-smi --query-gpu=name,driver_version,count --format=csv,noheader 2>/dev/null | head -2

echo "== NVML reads and event path (bench/nvml_probe.py)"
"$PY" "$REPO/bench/nvml_probe.py" > "$OUT/nvml-probe.json" && "$PY" -c "
import json; d = json.load(open('$OUT/nvml-probe.json'))
print({k: d[k] for k in ('driver', 'count', 'events_registered', 'events_wait_fd', 'events_in_2s', 'close_ms')})"

BENCH=("$PY" "$REPO/bench/agent_overhead.py" --seconds "$WIN" --cache-dir "$CACHE")
NVML=(--source nvml --json "$OUT/agent-nvml.json" --workdir /tmp/ab-nvml)
FAKE=(--source fake --gpus 8 --json "$OUT/agent-fake8.json" --workdir /tmp/ab-fake8)
rm -rf /tmp/ab-nvml /tmp/ab-fake8

echo "== stores (cached in $CACHE)"
"${BENCH[@]}" "${NVML[@]}" --prepare-only & p1=$!
"${BENCH[@]}" "${FAKE[@]}" --prepare-only & p2=$!
wait $p1 || echo "nvml prepare failed"
wait $p2 || echo "fake prepare failed"
rm -rf /tmp/ab-nvml /tmp/ab-fake8

echo "== measured runs"
"${BENCH[@]}" "${NVML[@]}" & p1=$!
"${BENCH[@]}" "${FAKE[@]}" & p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
# (the agents' stderr tails are in the JSONs: $OUT brings back at most 8 files, and this script writes 7)
r3=0
if [ "${EVENT_LATENCY:-1}" = 1 ]; then  # after the overhead runs: their agents read /dev/kmsg too
  echo "== event latency: kernel-log XID 79 -> alert (fake 8 GPUs, then the live GPUs by their NVML PCI ids)"
  "$PY" "$REPO/bench/event_latency.py" --rounds 3 --gap 1 --json "$OUT/event-latency-fake8.json" || r3=1
  "$PY" "$REPO/bench/event_latency.py" --source nvml --rounds 6 --gap 1 --json "$OUT/event-latency-nvml.json" || r3=1
fi
echo "== the rules over the 8-GPU 7-day store, rule by rule and per minute (bench/agent_rules_cost.py)"
BIG=$(ls -S "$CACHE"/store-*.duckdb 2>/dev/null | head -1)
[ -n "$BIG" ] && "$PY" "$REPO/bench/agent_rules_cost.py" "$BIG" --json "$OUT/agent-rules-cost.json" || r3=1
echo "== done: nvml rc=$r1 fake rc=$r2 latency/rules rc=$r3; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
[ "$r1" = 0 ] && [ "$r2" = 0 ] && [ "$r3" = 0 ]
