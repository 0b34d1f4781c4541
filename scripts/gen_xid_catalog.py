#!/usr/bin/env python3
"""Generate fleettool/data/xid/catalog.csv from NVIDIA's XID catalog as transcribed in
fixtures/samples/xid-catalog/xid_catalog_detailed.csv (provenance: xid_catalog.sources.md beside it).

The output keeps NVIDIA's own fields only (mnemonic, description, resolution buckets, which GPUs it applies to,
the r555 cause flags); fleettool's judgement (severity, action, category) lives in policy.yaml beside it.
Run it again when NVIDIA publishes a new catalog; tests/test_xid_catalog.py fails when the committed file and
the generator disagree.

    python3 scripts/gen_xid_catalog.py [--check]
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "fixtures" / "samples" / "xid-catalog" / "xid_catalog_detailed.csv"
TARGET = ROOT / "fleettool" / "data" / "xid" / "catalog.csv"
COLUMNS = [
    "xid",
    "mnemonic",
    "description",
    "immediate",
    "investigatory",
    "applies_h100",
    "applies_gb200",
    "causes",
]


def _clean(s: str) -> str:
    return " ".join((s or "").split())


def generate() -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(COLUMNS)
    with open(SOURCE, newline="", encoding="utf-8") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: int(r["xid"]))
    for r in rows:
        w.writerow(
            [
                int(r["xid"]),
                _clean(r["mnemonic"]),
                _clean(r["description"]),
                _clean(r["nvidia_immediate_action"]),
                _clean(r["nvidia_investigatory_action"]),
                _clean(r["applies_h100"]),
                _clean(r["applies_gb200"]),
                _clean(r["nvidia_r555_causes"]),
            ]
        )
    return out.getvalue()


def main() -> int:
    text = generate()
    if "--check" in sys.argv:
        same = TARGET.exists() and TARGET.read_text(encoding="utf-8") == text
        print(f"{TARGET}: {'up to date' if same else 'differs from the generator'}")
        return 0 if same else 1
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET} ({text.count(chr(10)) - 1} codes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
