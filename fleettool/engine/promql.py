"""Export rules as Prometheus alerting rules, over the agent's /metrics names or over dcgm-exporter's own.

Each kind says its own PromQL form (engine/kinds/<kind>.py) over a name set (kinds/_promql.py): threshold,
increase, rate, trend, node-scope peer, and events as counters (XIDs one rule per class of the catalog policy).
A rule with no PromQL form over the chosen names (NCCL localisation, SQL, absent series, fleet-scope peers, events
judged by their line, a metric dcgm-exporter does not have) is listed with the reason: fleettool evaluates it.

Annotations: `summary` is the rule's own, its placeholders read from the alert's labels (node -> Hostname, key ->
the sub-key's label: link, collector) and value; a placeholder only fleettool knows (a duration, an XID's text) is
dropped with the words that introduce it. `runbook_url` is the runbook's absolute URL under a configurable base.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from fleettool.engine.kinds import KINDS
from fleettool.engine.kinds._promql import NAME_SETS, NODE, NotExpressible, PromAlert, dur
from fleettool.engine.rules import Rule, kebab

# the project's runbooks (README: the image is ghcr.io/fleettool/fleettool; its home is github.com/fleettool)
DEFAULT_RUNBOOK_BASE = "https://github.com/fleettool/fleettool/blob/main/runbooks/"
NAME_SET_TEXT = {
    "fleettool": "the agent's /metrics (fleettool_*, base units; node label Hostname)",
    "dcgm": "dcgm-exporter's DCGM_FI_* series (labels Hostname, gpu, UUID, device, modelName, pci_bus_id)",
}


LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")  # Prometheus's label-name syntax
_NODE_WORD = re.compile(rf"(?<![A-Za-z0-9_]){NODE}(?![A-Za-z0-9_])")


def with_node_label(text: str, label: str = NODE) -> str:
    """Rule or test text with the node label `Hostname` (the agent's, and dcgm-exporter's through 4.x) named
    `label` instead: `hostname` for dcgm-exporter from its commit d5e5f51 (#655, May 2026) on, or whatever a
    fleet's relabelling calls the node. Every use is the label's (selectors, by/on/ignoring lists, templates)."""
    if not LABEL_NAME.fullmatch(label):
        raise ValueError(f"not a Prometheus label name: {label!r}")
    return text if label == NODE else _NODE_WORD.sub(label, text)


@dataclass
class Exported:
    """One Prometheus alerting rule, and the fleettool rule it comes from."""

    rule: Rule
    alert: PromAlert
    item: dict[str, Any]


@dataclass
class Export:
    names: str
    exported: list[Exported] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (rule, why it has no PromQL form here)
    text: str = ""

    def reason(self, alert: str) -> str | None:
        return next((why for a, why in self.skipped if a == alert), None)


def promql_of(r: Rule, names: str = "fleettool") -> list[PromAlert]:
    """The rule's Prometheus alerting rules over a name set; raises NotExpressible saying why there are none."""
    kind = KINDS[r.kind]
    if kind.promql is None:
        raise NotExpressible(kind.no_promql)
    form = kind.promql(r, NAME_SETS[names])
    return form if isinstance(form, list) else [form]


def runbook_url(r: Rule, base: str = DEFAULT_RUNBOOK_BASE) -> str:
    return f"{base.rstrip('/')}/{kebab(r.alert)}.md"


def build(
    rules: list[Rule],
    names: str = "fleettool",
    runbook_base: str = DEFAULT_RUNBOOK_BASE,
    node_label: str = NODE,
) -> Export:
    """The rules over one name set ("fleettool" or "dcgm"), as Prometheus rule file text and as data (the data
    keeps `Hostname`; the text names the node `node_label`)."""
    if names not in NAME_SETS:
        raise ValueError(f"unknown name set {names!r} (one of {', '.join(NAME_SETS)})")
    ex = Export(names)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rules:
        try:
            forms = promql_of(r, names)
        except NotExpressible as e:
            ex.skipped.append((r.alert, str(e)))
            continue
        for a in forms:
            item: dict[str, Any] = {"alert": a.name or r.alert, "expr": a.expr}
            if r.for_s:
                item["for"] = dur(r.for_s)
            if r.keep_s:
                item["keep_firing_for"] = dur(r.keep_s)
            item["labels"] = a.labels or {
                "severity": r.severity.value,
                "category": r.category.value,
                "action": r.action.value,
            }
            item["annotations"] = {
                "summary": summary(r.summary or r.alert, a.fills),
                "runbook_url": runbook_url(r, runbook_base),
            }
            groups.setdefault(r.group, []).append(item)
            ex.exported.append(Exported(r, a, item))
    doc = {"groups": [{"name": f"fleettool-{g}", "rules": rs} for g, rs in groups.items()]}
    flag = ("" if names == "fleettool" else f" --names {names}") + (
        "" if node_label == NODE else f" --node-label {node_label}"
    )
    head = f"# Generated by `fleettool rules export --prometheus{flag}`; do not edit (edit rules/*.yaml instead).\n"
    if ex.skipped:
        head += "# Not expressible in PromQL over these names (fleettool evaluates them): "
        head += ", ".join(a for a, _ in ex.skipped) + "\n"
        head += "".join(f"#   {a}: {why}\n" for a, why in ex.skipped)
    head += f"# Over {NAME_SET_TEXT[names]}.\n"
    ex.text = with_node_label(head + yaml.safe_dump(doc, sort_keys=False, width=120), node_label)
    return ex


def export_prometheus(
    rules: list[Rule], names: str = "fleettool", runbook_base: str = DEFAULT_RUNBOOK_BASE
) -> tuple[str, list[str]]:
    """Prometheus rule file text, and the names of the rules it could not express."""
    ex = build(rules, names, runbook_base)
    return ex.text, [a for a, _ in ex.skipped]


_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


def summary(tpl: str, fills: dict[str, str]) -> str:
    """A rule's summary as a Prometheus template: each placeholder the alert can fill becomes its template text;
    one it cannot is dropped with the words that introduce it ("for {duration}", "x{count}", ": {message}",
    a parenthesis around it; "GPU {gpu} on {node}" reads "a GPU on {node}" when the series has no gpu label)."""
    s = tpl
    for p in dict.fromkeys(_PLACEHOLDER.findall(tpl)):
        if p in fills:
            continue
        ph = re.escape("{" + p + "}")
        s = re.sub(rf"\bGPU {ph} on ", "a GPU on ", s)
        s = re.sub(rf"\s*\([^()]*{ph}[^()]*\)", "", s)
        s = re.sub(rf",?\s*\b(?:for|since|in about)\s+{ph}", "", s)
        s = re.sub(rf"\s*\bx{ph}", "", s)
        s = re.sub(rf":\s*{ph}", "", s)
        s = re.sub(rf"\s*{ph}", "", s)
    s = _PLACEHOLDER.sub(lambda m: fills.get(m.group(1), m.group(0)), s).strip()
    return s[:1].upper() + s[1:] if s.startswith("a GPU") else s
