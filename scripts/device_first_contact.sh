#!/usr/bin/env bash
# On the lent H200: install the core without a network (wheels carried in .whl/), start the agent exactly as the
# systemd unit does (real NVML, --kmsg=/dev/kmsg), write an XID 79 to /dev/kmsg, time event and alert, SIGTERM it.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
python3 -m pip install -q --no-deps --no-index .whl/*.whl 2>&1 | tail -2
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
FT="python3 -m fleettool"; command -v fleettool && FT=fleettool
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
ls -la /dev/kmsg; uname -r
DB=/tmp/ft/fleet.duckdb; mkdir -p /tmp/ft
$FT agent --db=$DB --metrics-port=9402 --kmsg=/dev/kmsg --flush 5s > /tmp/ft/agent.log 2>&1 &
PID=$!
sleep 8
PCI=$(nvidia-smi --query-gpu=pci.bus_id --format=csv,noheader | head -1 | sed 's/^0000//; s/^0*\([0-9A-Fa-f]\{4\}:\)/\1/')
T0=$(date +%s.%N)
echo "NVRM: Xid (PCI:${PCI:-0000:18:00}): 79, pid=1234, name=python3, GPU has fallen off the bus." > /dev/kmsg
echo "wrote XID 79 for PCI ${PCI} at $T0"
for i in $(seq 1 600); do
  if curl -s localhost:9402/metrics | grep -q 'fleettool_alerts{.*critical'; then echo "alert on /metrics after $(python3 -c "import time; print(round(time.time()-$T0,2))") s"; break; fi
  sleep 0.1
done
curl -s localhost:9402/metrics | grep -E '^fleettool_(events_total|alerts|agent_collector)' | head -20
sleep 6
$FT events --db $DB --json | head -c 1500; echo
$FT alerts --db $DB --json | head -c 1500; echo
T1=$(date +%s.%N); kill -TERM $PID; wait $PID; echo "agent exit $? after SIGTERM in $(python3 -c "import time; print(round(time.time()-$T1,2))") s"
tail -20 /tmp/ft/agent.log
} > "$OUT/first-contact.txt" 2>&1
cat "$OUT/first-contact.txt"
