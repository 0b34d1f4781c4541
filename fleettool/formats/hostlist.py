"""Slurm hostlist expressions, expanded as Slurm's own parser does (`scontrol show hostnames EXPR`).

`gpu-[01-08,10]`, `r[1-2]-n[01-18]` (several bracket groups: the first is the outermost loop), `a,b[1-2]`
(comma lists outside brackets), zero padding kept from the range's lower bound (`[08-10]`: 08, 09, 10).
Documented in Slurm's slurm.conf(5) ("NodeName ... a simple node range expression") and topology.conf(5)
(https://slurm.schedmd.com/topology.conf.html: "Slurm's hostlist expression parser is used, so the node and
switch names need not be consecutive (e.g. Nodes=tux[0-3,12,18-20])"). Pure: no I/O.
"""

from __future__ import annotations

import itertools

MAX_HOSTS = 1 << 20  # one expression never expands past this many names


class HostlistError(ValueError):
    """An expression Slurm would not take: an unclosed bracket, an empty or reversed range, a non-number."""


def split_top(expr: str) -> list[str]:
    """The comma-separated items of `expr`, commas inside brackets left alone."""
    items: list[str] = []
    depth, cur = 0, list[str]()
    for ch in expr:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"nested '[' in {expr!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"']' without '[' in {expr!r}")
        if ch == "," and depth == 0:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise HostlistError(f"unclosed '[' in {expr!r}")
    items.append("".join(cur))
    return items


def _range(body: str, expr: str) -> list[str]:
    out: list[str] = []
    for part in body.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise HostlistError(f"bad range {part!r} in {expr!r} (numbers only: [01-08,10])")
        if not sep:
            out.append(lo)
            continue
        a, b = int(lo), int(hi)
        if b < a:
            raise HostlistError(f"reversed range {part!r} in {expr!r}")
        if b - a >= MAX_HOSTS:
            raise HostlistError(f"range {part!r} in {expr!r} is over {MAX_HOSTS} names")
        width = len(lo)
        out.extend(str(i).zfill(width) for i in range(a, b + 1))
    return out


def _expand_item(item: str, expr: str) -> list[str]:
    texts: list[str] = []
    groups: list[list[str]] = []
    rest = item
    while "[" in rest:
        pre, _, tail = rest.partition("[")
        body, close, rest = tail.partition("]")
        if not close:
            raise HostlistError(f"unclosed '[' in {expr!r}")
        if not body:
            raise HostlistError(f"empty brackets in {expr!r}")
        texts.append(pre)
        groups.append(_range(body, expr))
    if not groups:
        return [rest]
    if rest:
        raise HostlistError(f"text {rest!r} after the last ']' in {expr!r} (Slurm refuses a suffix)")
    # Slurm's order: the last group varies fastest, then the first, the second, ..., the last but one slowest
    n = len(groups)
    loops = [*range(n - 2, -1, -1), n - 1]  # outermost first
    out = []
    for combo in itertools.product(*(groups[i] for i in loops)):
        picked = dict(zip(loops, combo, strict=True))
        out.append("".join(texts[i] + picked[i] for i in range(n)))
    return out


def expand(expr: str) -> list[str]:
    """Every host name of a Slurm hostlist expression, in Slurm's order (duplicates kept, as scontrol keeps
    them). Raise HostlistError for one Slurm would refuse."""
    expr = expr.strip()
    if not expr:
        return []
    out: list[str] = []
    for item in split_top(expr):
        item = item.strip()
        if not item:
            continue
        if any(c.isspace() for c in item):
            raise HostlistError(f"a space inside {item!r}")
        out.extend(_expand_item(item, expr))
        if len(out) > MAX_HOSTS:
            raise HostlistError(f"{expr!r} expands past {MAX_HOSTS} names")
    return out
