#!/usr/bin/env bash
# Before and after on ONE lent machine, at the same time: bench/device_agent.sh of an older tree (BEFORE, a
# `git archive` of the baseline commit unpacked into an ignored folder and carried) and of this tree, started
# together so that both see the same machine, the same GPU and the same load. Two device calls land on two machines
# that can differ 2x in CPU speed (bench/README.md, "On a lent H100"); this is why both run in one call.
#
#   git archive <base> | (mkdir -p .before && tar -x -C .before)     # here; .before/ is git-ignored locally
#   run(command="bash bench/device_agent_ab.sh 90", carry=[".whl", ".before"])
#
# Each tree runs its own harness (its bench/ scripts with its own fleettool), in its own work folders, store cache
# and site folder. The runs share the 16 cores and the GPU: each figure is a process's own CPU time, and the live
# NVML reads of both agents and both bare loops go to the same GPU, so the "before" and "after" pairs see the same
# contention. Everything comes back as one tarball ($OUT/ab.tar.gz; the device returns at most 8 files).
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
BEFORE=${BEFORE:-$REPO/.before}
WIN=${1:-90}
OUT=${OUT:-/tmp/agent-ab-out}
W=/tmp/agent-ab
rm -rf "$W" && mkdir -p "$W/before" "$W/after" "$OUT"
[ -d "$BEFORE/bench" ] || { echo "no baseline tree at $BEFORE (carry .before)"; exit 1; }
[ -e "$BEFORE/.whl" ] || ln -s "$REPO/.whl" "$BEFORE/.whl"
# the baseline's script names fixed /tmp folders: give its copy its own
sed -i 's#/tmp/ab-#/tmp/b-ab-#g; s#/tmp/fleettool-src#/tmp/b-fleettool-src#g' "$BEFORE/bench/device_agent.sh"
echo "== device_agent_ab.sh $(date -u +%FT%TZ) window ${WIN}s; before = $BEFORE, after = $REPO"
(OUT=$W/before CACHE=/tmp/cache-before SITE=/tmp/site-before EVENT_LATENCY=0 \
  bash "$BEFORE/bench/device_agent.sh" "$WIN" > "$W/before.txt" 2>&1) & pb=$!
(OUT=$W/after CACHE=/tmp/cache-after SITE=/tmp/site-after EVENT_LATENCY=0 \
  bash "$REPO/bench/device_agent.sh" "$WIN" > "$W/after.txt" 2>&1) & pa=$!
wait $pb; rb=$?
wait $pa; ra=$?
echo "== before rc=$rb, after rc=$ra ($(date -u +%T))"
for t in before after; do
  echo "--- $t"; grep -E '^==|cpu|rss|ratio|rc=' "$W/$t.txt" | tail -25
done
tar -czf "$OUT/ab.tar.gz" -C "$W" .
[ "$rb" = 0 ] && [ "$ra" = 0 ]
