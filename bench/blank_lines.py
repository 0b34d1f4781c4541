"""Blank lines cost what their content costs (issue 27, item 7): `fleettool replay` of 97 KB of gzip that expands to
100 M blank lines, beside the same command over the same number of bytes of valid samples, and beside Python only
gunzipping the blank file, all in one run, one process at a time.

Each case is a subprocess (the CLI beside this Python, or `python -c`); wall time from spawn to exit, peak RSS from
the kernel's own account of that child (os.wait4's ru_maxrss). Best wall of --repeat runs, the highest peak RSS.
The stored rows are counted and must be what the file holds, or the run fails (a fast wrong path cannot pass).

  python bench/blank_lines.py --json bench/results/blank-lines-dev.json
  python bench/blank_lines.py --lines 2000000000   # the 2 GiB bound's worst: ~2 MB of gzip
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb

HEAD = b'# TYPE DCGM_FI_DEV_GPU_TEMP gauge\nDCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"} 41 1714564800\n'
TAIL = b'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="n1"} 43 1714564860\n# EOF\n'
FIELDS = ("GPU_TEMP", "POWER_USAGE", "SM_CLOCK", "MEM_CLOCK", "GPU_UTIL")


def blank_file(path: Path, lines: int) -> int:
    """HEAD, `lines` newlines, TAIL, gzipped: the issue's file (2 samples)."""
    with gzip.open(path, "wb", 9) as f:
        f.write(HEAD)
        step = 10_000_000
        for i in range(0, lines, step):
            f.write(b"\n" * min(step, lines - i))
        f.write(TAIL)
    return 2


def samples_file(path: Path, size: int) -> int:
    """dcgm-exporter-shaped samples (8 GPUs x 5 fields, 1 Hz) up to `size` bytes of text, gzipped; how many."""
    n = written = 0
    with gzip.open(path, "wb", 6) as f:
        t = 1714564800
        while written < size:
            block = []
            for g in range(8):
                for k, name in enumerate(FIELDS):
                    block.append(
                        f'DCGM_FI_DEV_{name}{{gpu="{g}",UUID="GPU-{g:04d}",Hostname="n1"}} {40 + k + g} {t}\n'
                    )
            data = "".join(block).encode()
            f.write(data)
            written += len(data)
            n += len(block)
            t += 1
        f.write(b"# EOF\n")
    return n


def run(cmd: list[str]) -> tuple[float, int, int]:
    """(wall seconds, peak RSS KiB, exit code) of one child."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode() if p.stderr else ""
    if p.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}: {err.strip()[:300]}")
    return wall, ru.ru_maxrss, p.returncode


def in_process(blank: Path, repeat: int) -> dict[str, float]:
    """In this process, no start-up: gunzip alone (recording.files.iter_blocks, as replay reads a .gz) and gunzip
    plus fleettool's parser (formats.openmetrics.parse_stream over those blocks); best of `repeat`."""
    from fleettool.formats.openmetrics import ExpositionParser, parse_stream
    from fleettool.recording.files import iter_blocks

    def gunzip() -> None:
        for _ in iter_blocks(blank, 1 << 20):
            pass

    def parse() -> None:
        p = ExpositionParser(str(blank), millis=False)
        n = sum(len(c.sid) for c in parse_stream(p, iter_blocks(blank, 1 << 20)))
        assert n == 2 and not p.issues and p.saw_eof, (n, p.issues)

    out = {}
    for key, fn in (("gunzip_s", gunzip), ("gunzip_parse_s", parse)):
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - t0)
        out[key] = round(best, 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--lines", type=int, default=100_000_000, help="blank lines (default 100 M: 97 KB of gzip)"
    )
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    exe = str(Path(sys.executable).parent / "fleettool")
    out: dict[str, Any] = {"machine": platform.node(), "python": platform.python_version(), "cases": {}}
    with tempfile.TemporaryDirectory(prefix="blank-bench-") as td:
        tmp = Path(td)
        blank = tmp / "blank.om.gz"
        want_blank = blank_file(blank, a.lines)
        size = len(HEAD) + a.lines + len(TAIL)
        valid = tmp / "samples.om.gz"
        want_valid = samples_file(valid, size)
        tiny = tmp / "two-samples.om.gz"
        tiny.write_bytes(gzip.compress(HEAD + TAIL))
        bare = f"import gzip\nf = gzip.open({str(blank)!r})\nwhile f.read(1 << 20): pass"
        cases = {
            "replay, blank lines": ([exe, "replay", str(blank), "-q"], blank, want_blank),
            "replay, the same 2 samples without the blank lines": ([exe, "replay", str(tiny), "-q"], tiny, 2),
            "replay, valid samples, same text size": ([exe, "replay", str(valid), "-q"], valid, want_valid),
            "python gunzipping the blank file (no parse)": ([sys.executable, "-c", bare], None, None),
        }
        run([exe, "replay", str(blank), "-q", "--db", str(tmp / "warm.duckdb")])  # bytecode, page cache
        for name, (cmd, src, want) in cases.items():
            walls, rss = [], 0
            for i in range(a.repeat):
                db = tmp / f"r{i}.duckdb"
                wall, peak, _ = run(cmd + (["--db", str(db)] if src else []))
                walls.append(wall)
                rss = max(rss, peak)
                if src is not None:
                    got = (
                        duckdb.connect(str(db), read_only=True)
                        .execute("SELECT count(*) FROM samples")
                        .fetchone()
                    )
                    if not got or got[0] != want:
                        sys.exit(f"{name}: stored {got} samples, the file holds {want}")
                    db.unlink()
            out["cases"][name] = {
                "wall_s": round(min(walls), 3),
                "walls_s": [round(w, 3) for w in walls],
                "peak_rss_mib": round(rss / 1024, 1),
                "file_bytes": (src or blank).stat().st_size,
                "text_bytes": size,
                "samples": want,
            }
        out["in_process"] = in_process(blank, a.repeat)
    c = out["cases"]
    b, t, v, g = (c[k] for k in cases)
    ip = out["in_process"]
    out["ratios"] = {
        "blank / valid samples, wall": round(b["wall_s"] / v["wall_s"], 2),
        "blank / valid samples, peak RSS": round(b["peak_rss_mib"] / v["peak_rss_mib"], 2),
        "blank - 2 samples alone, wall (s)": round(b["wall_s"] - t["wall_s"], 3),
        "blank / python gunzip, wall": round(b["wall_s"] / g["wall_s"], 2),
        "in process: gunzip + parse / gunzip alone": round(ip["gunzip_parse_s"] / ip["gunzip_s"], 2),
    }
    print(json.dumps(out, indent=2))
    if a.json:
        a.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
