"""Stand-ins for the tools remediation drives (nvidia-smi, systemctl, scontrol, kubectl, ipmitool, ssh, curl,
fleettool on a remote node, ...): one script, installed under each tool's name in a directory put first on PATH,
that replays a recorded sequence instead of touching a GPU, a scheduler or a BMC.

A sequence is JSON: {"phase": "start", "rules": [...]}. Each rule:
  {"tool": "nvidia-smi", "match": "REGEX", "node": "gpu-17", "when": "start" | ["a", "b"],
   "replies": [{"stdout": "...", "stdout_file": "rel/path", "stderr": "...", "rc": 0, "sleep": 0.0}, ...],
   "set": "after-reset"}
The first rule whose tool is the command's name, whose `match` (re.search) matches the arguments joined by spaces,
whose `node` (if given) is the node the command was sent to, and whose `when` (if given) holds the current phase,
answers. Its replies are given in order, the last one repeated; then the phase becomes `set` (if given), so a
sequence says "nvidia-smi -q says Reset until nvidia-smi -r succeeded" without counting calls. stdout_file is read
relative to the sequence's directory (a recorded nvidia-smi -q, a burn-in report).

ssh and `kubectl exec ... -- CMD` are unwrapped: the remote command is answered by the rule of its own tool, with
`node` set to the ssh target (for kubectl exec, the node the pod was listed for, from the sequence's "pods" map:
{"pod-name": "node"}); a rule for tool "ssh" or "kubectl" with match "^exec" answers instead where one matches.

Every call is appended to calls.jsonl (tool, args, node, phase, rc, rule index), and a call no rule answers gets
rc 127 and "standin: no reply recorded for ..." on stderr, so tests see exactly what ran and in what order.
"""

from __future__ import annotations

import json
import os
import re
import select
import shlex
import sys
import time
from pathlib import Path
from typing import Any

TOOLS = ("nvidia-smi", "systemctl", "scontrol", "kubectl", "ipmitool", "ssh", "curl", "fleettool", "dmesg",
         "journalctl", "sinfo", "srun", "fuser", "pkill")  # fmt: skip


def install(bin_dir: Path, sequence: Path | dict[str, Any], tools: tuple[str, ...] = TOOLS) -> Path:
    """Make `bin_dir` hold a stand-in for each tool, answering from `sequence` (a file, or a dict written to
    bin_dir/sequence.json). Returns the state directory (STANDIN_DIR); put bin_dir first on PATH and pass
    STANDIN_DIR in the environment (see env())."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state = bin_dir / "state"
    state.mkdir(exist_ok=True)
    if isinstance(sequence, dict):
        seq_path = bin_dir / "sequence.json"
        seq_path.write_text(json.dumps(sequence))
    else:
        seq_path = sequence
    (state / "sequence").write_text(str(seq_path.resolve()))
    me = Path(__file__).resolve()
    for tool in tools:
        exe = bin_dir / tool
        exe.write_text(
            f"#!{sys.executable}\nimport importlib.util, sys\n"
            f"spec = importlib.util.spec_from_file_location('standin', {str(me)!r})\n"
            "mod = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(mod)\n"
            f"sys.exit(mod.main({tool!r}))\n"
        )
        exe.chmod(0o755)
    return state


def env(bin_dir: Path) -> dict[str, str]:
    """The environment that puts the stand-ins first on PATH."""
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "STANDIN_DIR": str(bin_dir / "state"),
    }


def calls(bin_dir: Path) -> list[dict[str, Any]]:
    """Every call the stand-ins answered, in order."""
    log = bin_dir / "state" / "calls.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def phase(bin_dir: Path) -> str:
    st = bin_dir / "state" / "phase"
    return st.read_text() if st.exists() else ""


# ---- the stand-in itself ----


def _unwrap(tool: str, args: list[str], pods: dict[str, str]) -> tuple[str, list[str], str | None] | None:
    """(tool, args, node) of the command inside `ssh ... -- NODE 'CMD'` or `kubectl exec ... POD -- CMD`."""
    if tool == "ssh":
        rest = args[args.index("--") + 1 :] if "--" in args else [a for a in args if not a.startswith("-")]
        if len(rest) >= 2:
            inner = shlex.split(" ".join(rest[1:]))
            return inner[0], inner[1:], rest[0]
    if tool == "kubectl" and args[:1] == ["exec"] and "--" in args:
        i = args.index("--")
        head, inner = args[:i], args[i + 1 :]
        pod = next((p for p in head[1:] if p in pods), None)
        if inner:
            return inner[0], inner[1:], pods.get(pod) if pod else None
    return None


def _answer(
    tool: str, args: list[str], node: str | None, seq: dict[str, Any], state: Path
) -> tuple[dict[str, Any], int | None]:
    ph_file = state / "phase"
    ph = ph_file.read_text() if ph_file.exists() else str(seq.get("phase", "start"))
    counts_file = state / "counts.json"
    counts = json.loads(counts_file.read_text()) if counts_file.exists() else {}
    joined = " ".join(args)
    for i, rule in enumerate(seq["rules"]):
        if rule["tool"] != tool or not re.search(rule.get("match", ""), joined):
            continue
        if "node" in rule and rule["node"] != node:
            continue
        when = rule.get("when")
        if when is not None and ph not in ([when] if isinstance(when, str) else when):
            continue
        n = int(counts.get(str(i), 0))
        replies = rule["replies"]
        reply = replies[min(n, len(replies) - 1)]
        counts[str(i)] = n + 1
        counts_file.write_text(json.dumps(counts))
        if "set" in rule:
            ph_file.write_text(rule["set"])
        else:
            ph_file.write_text(ph)
        return reply, i
    if not ph_file.exists():
        ph_file.write_text(ph)
    return {
        "stderr": f"standin: no reply recorded for {tool} {joined} (node {node}, phase {ph})\n",
        "rc": 127,
    }, None


def main(tool: str) -> int:
    args = sys.argv[1:]
    state = Path(os.environ["STANDIN_DIR"])
    seq_path = Path((state / "sequence").read_text())
    seq = json.loads(seq_path.read_text())
    node: str | None = None
    inner = _unwrap(tool, args, seq.get("pods", {}))
    wrapper_rule = any(
        r["tool"] == tool and re.search(r.get("match", ""), " ".join(args)) for r in seq["rules"]
    )
    if inner is not None and not wrapper_rule:
        tool, args, node = inner
    stdin = ""
    # read what was piped in (a manifest for kubectl apply -f -), never wait on an inherited stdin nobody writes
    if sys.stdin is not None and not sys.stdin.isatty() and select.select([sys.stdin], [], [], 0.2)[0]:
        stdin = sys.stdin.read()
    reply, rule = _answer(tool, args, node, seq, state)
    out = reply.get("stdout", "")
    if "stdout_file" in reply:
        out = (seq_path.parent / reply["stdout_file"]).read_text()
    rc = int(reply.get("rc", 0))
    with open(state / "calls.jsonl", "a") as f:
        f.write(json.dumps({"tool": tool, "args": args, "node": node, "rc": rc, "rule": rule,
                            "stdin": stdin[:4000], "t": time.time()}) + "\n")  # fmt: skip
    if reply.get("sleep"):
        time.sleep(float(reply["sleep"]))
    sys.stdout.write(out)
    sys.stderr.write(reply.get("stderr", ""))
    return rc


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[0]).name))
