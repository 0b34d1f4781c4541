"""A CSV of node topology: a header with `node` and any of rack, nvlink_domain, leaf, spine, zone, clique,
gpu_product; every further column is kept as an extra key of that name. An empty cell is no value.
(RFC 4180 CSV, https://www.rfc-editor.org/rfc/rfc4180.) Pure: lines in, node -> keys and issues out."""

from __future__ import annotations

import csv
from collections.abc import Iterable

from fleettool.formats.errors import ParseIssue

TOPOLOGY_KEYS = ("rack", "nvlink_domain", "leaf", "spine", "zone", "clique", "gpu_product")


def sniff(first_line: str) -> bool:
    cols = [c.strip().lower() for c in next(csv.reader([first_line]), [])]
    return "node" in cols and any(k in cols for k in TOPOLOGY_KEYS)


def parse_topology_csv(
    lines: Iterable[str], path: str = "-"
) -> tuple[dict[str, dict[str, str]], list[ParseIssue]]:
    out: dict[str, dict[str, str]] = {}
    issues: list[ParseIssue] = []
    header: list[str] | None = None
    for lineno, row in enumerate(csv.reader(lines), 1):
        if not row or not any(c.strip() for c in row):
            continue
        if header is None:
            header = [c.strip().lower() for c in row]
            if "node" not in header:
                return {}, [ParseIssue(path, lineno, "the header has no node column")]
            continue
        if len(row) != len(header):
            issues.append(ParseIssue(path, lineno, f"{len(row)} fields where the header has {len(header)}"))
            continue
        cells = dict(zip(header, (c.strip() for c in row), strict=True))
        node = cells.pop("node")
        if not node:
            issues.append(ParseIssue(path, lineno, "no node name"))
            continue
        out.setdefault(node, {}).update({k: v for k, v in cells.items() if v and k})
    return out, issues
