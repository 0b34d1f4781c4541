#!/usr/bin/env bash
# Record, on a lent GPU machine (device tool, carry .whl), the read-only outputs remediation's proof parses:
# nvidia-smi -q (GPU Recovery Action), nvidia-smi nvlink -s, the compute-apps query, -L, the boot id, the kernel
# log's time formats (journalctl -k short-iso-precise, dmesg --time-format iso), and a real per-GPU burn-in report
# (`fleettool burnin --json --no-store --tests gemm,hbm`). Nothing here resets, reconfigures or stops anything on
# the GPU (no -r, no -pm): the device's rules forbid it. Outputs go to $OUT.
#
#   bash scripts/device_remediation_outputs.sh [BURNIN_SECONDS]
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp/remediation-out}
PY=${PYTHON:-python3}
SITE=/tmp/site
DUR=${1:-15}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/record.log") 2>&1
if ! $PY -c 'import duckdb, typer, torch, pydantic; from typer._click import exceptions' 2>/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$REPO"/.whl/*.whl || exit 1
  export PYTHONPATH=$SITE
fi
SRC=/tmp/fleettool-src
rm -rf "$SRC" && mkdir -p "$SRC/fleettool"
for f in "$REPO"/fleettool/*; do ln -s "$f" "$SRC/fleettool/"; done
for d in collectors tui rules runbooks; do ln -s "$REPO/$d" "$SRC/fleettool/$d"; done
export PYTHONPATH=$SRC${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi -q -i 0 > "$OUT/nvidia-smi-q-i0.txt" 2>&1; echo "q rc=$?"
nvidia-smi nvlink -s -i 0 > "$OUT/nvidia-smi-nvlink-s-i0.txt" 2>&1; echo "nvlink -s rc=$?"
{
  echo "## nvidia-smi -L"; nvidia-smi -L; echo "rc=$?"
  echo "## nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader -i 0 (idle)"
  nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader -i 0; echo "rc=$?"
  echo "## nvidia-smi -q -i 7 (no such GPU)"; nvidia-smi -q -i 7; echo "rc=$?"
  echo "## nvidia-smi nvlink -s -i 7 (no such GPU)"; nvidia-smi nvlink -s -i 7; echo "rc=$?"
  echo "## nvidia-smi --query-gpu=index,persistence_mode,pci.bus_id,serial,uuid,name,driver_version --format=csv"
  nvidia-smi --query-gpu=index,persistence_mode,pci.bus_id,serial,uuid,name,driver_version --format=csv; echo "rc=$?"
  echo "## cat /proc/sys/kernel/random/boot_id"; cat /proc/sys/kernel/random/boot_id
  echo "## journalctl -k -o short-iso-precise --no-pager | tail -5"; journalctl -k -o short-iso-precise --no-pager 2>&1 | tail -5; echo "rc=$?"
  echo "## dmesg --time-format iso | tail -5"; dmesg --time-format iso 2>&1 | tail -5; echo "rc=$?"
  echo "## systemctl is-active nvidia-persistenced nvidia-fabricmanager nvidia-dcgm"; systemctl is-active nvidia-persistenced nvidia-fabricmanager nvidia-dcgm 2>&1; echo "rc=$?"
} > "$OUT/nvidia-smi-misc.txt" 2>&1
echo "== burn-in (gemm, hbm, ${DUR}s each)"
(cd / && $PY -m fleettool burnin --json --no-store --gpus 0 --tests gemm,hbm --duration "${DUR}s" > "$OUT/burnin-gemm-hbm.json" 2> "$OUT/burnin.stderr"); echo "burnin rc=$?"
tail -5 "$OUT/burnin.stderr"
$PY - "$OUT/burnin-gemm-hbm.json" <<'PYEOF'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d.get("results", []):
    print(r.get("gpu"), r.get("test"), r.get("figure"), r.get("unit"), r.get("floor"), r.get("verdict"))
PYEOF
ls -la "$OUT"
