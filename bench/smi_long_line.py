"""nvidia-smi -q text: the cost of one long line with no colon (a pasted file's garbage, a run of spaces).

The parser splits `Key : value` at the first colon by str.find; the regex it replaced, `^(\\s*)(.+?)\\s*:\\s?(.*)$`,
backtracks over every run of spaces for every end of its lazy key, quadratic in the run's length. Both are timed
here on the same lines, in one run: `python bench/smi_long_line.py [--spaces 5000 10000 20000]`.
"""

from __future__ import annotations

import argparse
import re
import time

from fleettool.formats.nvidia_smi import parse_text

OLD_KV = re.compile(r"^(\s*)(.+?)\s*:\s?(.*)$")  # the bare baseline: what parse_text matched each line with


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spaces", type=int, nargs="+", default=[5000, 10000, 20000])
    args = ap.parse_args()
    print(f"{'spaces':>8} {'old regex s':>12} {'parse_text s':>13} {'ratio':>9}")
    for n in args.spaces:
        line = "    a" + " " * n + "b"
        t0 = time.perf_counter()
        OLD_KV.match(line)
        old = time.perf_counter() - t0
        t0 = time.perf_counter()
        parse_text(["GPU 00000000:01:00.0", line])
        new = time.perf_counter() - t0
        print(f"{n:>8} {old:>12.4f} {new:>13.6f} {old / new:>8.0f}x")


if __name__ == "__main__":
    main()
