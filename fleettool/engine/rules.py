"""Rule files: Prometheus-like groups of typed rules, loaded from YAML and validated.

    groups:
      - name: thermal
        rules:
          - alert: GpuThermalSlowdown
            kind: threshold            # one of engine/kinds/ (KINDS): threshold, increase, rate, trend, ...
            metric: clock_event_reasons
            bitmask_any: 0x60
            for: 2m
            keep_firing_for: 5m
            severity: warning          # info | warning | critical
            category: thermal          # fleettool.model.Category
            action: inspect-hardware
            incident: clocks           # findings of one GPU with the same incident key become one alert
            summary: "GPU {gpu} on {node}: thermal slowdown for {duration}"
            references: [...]
            false_positives: [...]

The fields beyond the common ones are the kind's (engine/kinds/<kind>.py says which, and which are required
or durations). The runbook link is derived from the alert name: GpuThermalSlowdown ->
runbooks/gpu-thermal-slowdown.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fleettool import units
from fleettool.engine.kinds import KINDS
from fleettool.metrics import METRICS
from fleettool.model import Action, Category, Severity

OPS = (">", ">=", "<", "<=", "==", "!=")
RUNBOOK_BASE = "runbooks/"

COMMON = {
    "alert",
    "kind",
    "for",
    "keep_firing_for",
    "severity",
    "category",
    "action",
    "incident",
    "priority",
    "summary",
    "references",
    "false_positives",
    "maturity",
    "description",
}


class RuleError(ValueError):
    """A rule file that cannot be used: names the file, the rule and what is wrong."""


def parse_duration(v: Any, what: str = "duration") -> float:
    """A rule or rule-test duration (units.parse_duration: 90, "90s", "1h30m", "2w"); absent is 0."""
    if v is None:
        return 0.0
    try:
        return units.parse_duration(v)
    except ValueError as e:
        raise RuleError(f"bad duration for {what!r}: {e}") from None


def kebab(name: str) -> str:
    """GpuThermalSlowdown -> gpu-thermal-slowdown; XIDByCatalog -> xid-by-catalog."""
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", name)
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", s)
    return s.replace("_", "-").lower()


@dataclass(frozen=True)
class Rule:
    alert: str
    kind: str
    severity: Severity
    category: Category
    action: Action
    for_s: float = 0.0
    keep_s: float = 0.0
    incident: str = ""
    priority: int = 0
    summary: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    references: tuple[str, ...] = ()
    false_positives: tuple[str, ...] = ()
    maturity: str = "stable"
    group: str = ""
    source: str = ""

    @property
    def runbook(self) -> str:
        return f"{RUNBOOK_BASE}{kebab(self.alert)}.md"

    @property
    def incident_key(self) -> str:
        return self.incident or self.alert

    def p(self, key: str, default: Any = None) -> Any:
        return self.params.get(key, default)


def _rule(d: dict[str, Any], where: str, group: str) -> Rule:
    def err(msg: str) -> RuleError:
        return RuleError(f"{where}: rule {d.get('alert', '?')!r}: {msg}")

    if not isinstance(d, dict):
        raise RuleError(f"{where}: a rule must be a mapping")
    for key in ("alert", "kind", "severity", "category", "action"):
        if key not in d:
            raise err(f"missing {key!r}")
    kind = KINDS.get(d["kind"]) if isinstance(d["kind"], str) else None
    if kind is None:
        raise err(f"unknown kind {d['kind']!r} (one of {', '.join(KINDS)})")
    unknown = set(d) - COMMON - kind.fields
    if unknown:
        raise err(f"unknown field(s) {sorted(unknown)} for kind {kind.name}")
    try:
        sev, cat, act = Severity(d["severity"]), Category(d["category"]), Action(d["action"])
    except ValueError as e:
        raise err(str(e)) from None
    metric = d.get("metric")
    if metric is not None and metric not in METRICS:
        raise err(f"unknown metric {metric!r}")
    sub = d.get("sub")
    if sub is not None and not (
        isinstance(sub, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=[^=\s]+", sub)
    ):
        raise err(f'sub {sub!r}: one sub-series as label=value, e.g. "link=3"')
    for mkey in ("than_metric", "when_metric", "needs_metric"):
        if d.get(mkey) is not None and d[mkey] not in METRICS:
            raise err(f"unknown metric {d[mkey]!r} in {mkey}")
    if "op" in d and d["op"] not in OPS:
        raise err(f"unknown op {d['op']!r}")
    for need in kind.requires:
        if not d.get(need):
            raise err(f"needs a {need}")
    try:
        for_s = parse_duration(d.get("for"), "for")
        keep_s = parse_duration(d.get("keep_firing_for"), "keep_firing_for")
        params = dict(d)
        for k in kind.durations & set(params):
            params[k] = parse_duration(params[k], k)
    except RuleError as e:
        raise err(str(e)) from None
    for k in COMMON:
        params.pop(k, None)
    return Rule(
        alert=str(d["alert"]),
        kind=kind.name,
        severity=sev,
        category=cat,
        action=act,
        for_s=for_s,
        keep_s=keep_s,
        incident=str(d.get("incident", "")),
        priority=int(d.get("priority", 0)),
        summary=str(d.get("summary", "")),
        params=params,
        references=tuple(d.get("references") or ()),
        false_positives=tuple(d.get("false_positives") or ()),
        maturity=str(d.get("maturity", "stable")),
        group=group,
        source=where,
    )


def _yaml(text: str) -> Any:
    """yaml.safe_load through libyaml's parser when PyYAML has it (~4x faster: the built-in rules load in
    every replay); a document it refuses is parsed again by the pure-Python loader, whose error is raised."""
    fast = getattr(yaml, "CSafeLoader", None)
    if fast is not None:
        try:
            return yaml.load(text, Loader=fast)  # noqa: S506 - CSafeLoader is the safe loader
        except yaml.YAMLError:
            pass
    return yaml.safe_load(text)


def parse_rules(text: str, where: str) -> list[Rule]:
    try:
        doc = _yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise RuleError(f"{where}{line}: not YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise RuleError(f"{where}: expected a mapping with a 'groups' list")
    out = []
    for g in doc["groups"]:
        if not isinstance(g, dict) or "name" not in g or not isinstance(g.get("rules"), list):
            raise RuleError(f"{where}: each group needs a name and a rules list")
        for r in g["rules"]:
            out.append(_rule(r, where, str(g["name"])))
    return out


def builtin_rule_files() -> list[tuple[str, str]]:
    root = resources.files("fleettool.rules")
    return sorted(
        (f"rules/{p.name}", p.read_text(encoding="utf-8"))
        for p in root.iterdir()
        if p.name.endswith((".yaml", ".yml")) and p.is_file()
    )


def given_rule_files(paths: list[Path]) -> list[tuple[str, str]]:
    """(where, text) of the rule files given: files as they are, directories' *.yaml / *.yml."""
    files: list[tuple[str, str]] = []
    for p in paths:
        if p.is_dir():
            files += [(str(f), f.read_text()) for f in sorted(p.glob("*.y*ml")) if f.is_file()]
        else:
            files.append((str(p), p.read_text()))
    return files


def load_rules(paths: list[Path] | None = None, *, builtin: bool | None = None) -> list[Rule]:
    """The built-in rules plus the rule files given (files or directories). `builtin` False: the files given
    alone; None (a rule test's rule_files): the built-in set only when no files are given. Names must be
    unique; a file's rule named as a built-in one is refused, naming both."""
    if builtin is None:
        builtin = not paths
    own = builtin_rule_files() if builtin else []
    rules: list[Rule] = []
    seen: dict[str, str] = {}
    builtin_where = {w for w, _ in own}
    for where, text in own + given_rule_files(paths or []):
        for r in parse_rules(text, where):
            if r.alert in seen:
                if seen[r.alert] in builtin_where and where not in builtin_where:
                    raise RuleError(
                        f"{where}: rule {r.alert!r} is also a built-in rule ({seen[r.alert]}): rename it, or "
                        "replace the built-in set with --no-builtin-rules"
                    )
                raise RuleError(f"{where}: rule {r.alert!r} is also defined in {seen[r.alert]}")
            seen[r.alert] = where
            rules.append(r)
    return rules


def runbook_names(folder: Path | None = None) -> set[str]:
    """The runbooks (*.md but README.md) of a folder, or fleettool's own."""
    root = resources.files("fleettool.runbooks") if folder is None else folder
    return {p.name for p in root.iterdir() if p.name.endswith(".md") and p.name.lower() != "readme.md"}


def check_rules(rules: list[Rule], books: set[str] | None = None, where: str = RUNBOOK_BASE) -> list[str]:
    """Lint beyond the schema: every rule has a runbook and a summary; every runbook has a rule. `books`: the
    runbooks' names in `where` (default: fleettool's own runbooks/)."""
    problems = []
    books = runbook_names() if books is None else books
    wanted = {kebab(r.alert) + ".md" for r in rules}
    for r in rules:
        if kebab(r.alert) + ".md" not in books:
            problems.append(f"{r.source}: rule {r.alert}: no runbook {where}{kebab(r.alert)}.md")
        if not r.summary:
            problems.append(f"{r.source}: rule {r.alert}: no summary")
    for b in sorted(books - wanted):
        problems.append(f"{where}{b}: no rule named after it")
    return problems


def site_runbooks(folder: Path) -> Path | None:
    """Where a site's rule folder keeps its runbooks: FOLDER/runbooks, else a runbooks/ beside it (as
    fleettool's own rules/ and runbooks/ are); None when neither exists."""
    for d in (folder / "runbooks", folder.parent / "runbooks"):
        if d.is_dir():
            return d
    return None
