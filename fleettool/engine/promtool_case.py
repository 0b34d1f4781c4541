"""One case of the engine's rule tests as a promtool case over one name set (input series, events as that set's
series, each expected alert's labels and annotations), or a Gap saying why PromQL cannot carry it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Protocol

from fleettool.engine.kinds._held import hold_of
from fleettool.engine.kinds._promql import NAME_SETS, NODE, dur
from fleettool.engine.kinds.event import class_alert
from fleettool.engine.promql import Export
from fleettool.engine.promtool_inputs import Entity, Series, dcgm_identity, values_text
from fleettool.engine.rules import Rule, parse_duration
from fleettool.engine.ruletest import eval_time, expand_values, metric_of, parse_series
from fleettool.xid_catalog import judge


class PromtoolTests(Protocol):
    """What a case adds to (fleettool.engine.promtool_tests.PromtoolTests): gaps, cases, the alerts seen firing
    and quiet, the summaries expected."""

    gaps: list[Gap]
    cases: int
    firing: set[str]
    quiet: set[str]
    summaries: dict[str, set[str]]


VALUE_MARK = "VALUE"
VALUE_TEMPLATE = re.compile(r"\{\{[^{}]*\$value[^{}]*\}\}")
_LABEL_TEMPLATE = re.compile(r"\{\{\s*\$labels\.(\w+)\s*\}\}")


@dataclass(frozen=True)
class Gap:
    """A case of the engine's tests that the promtool tests do not run, and why."""

    source: str
    test: int
    alertname: str
    eval_time: str
    reason: str

    def line(self) -> str:
        return f"{self.source} test {self.test} {self.alertname} @ {self.eval_time}: {self.reason}"


def render(tpl: str, labels: dict[str, str]) -> str:
    """An exported annotation as promtool renders it on the rule copy (a label the alert lacks reads "", as in
    Prometheus)."""
    s = VALUE_TEMPLATE.sub(VALUE_MARK, tpl)
    return _LABEL_TEMPLATE.sub(lambda m: labels.get(m.group(1), ""), s)


class Case:
    def __init__(self, ex: Export, rules: list[Rule], source: str, index: int, case: dict[str, Any]) -> None:
        self.ex = ex
        self.names = NAME_SETS[ex.names]
        self.by_name = {r.alert: r for r in rules}
        self.source, self.index, self.case = source, index, case
        self.interval = parse_duration(case.get("interval", "1m"), "interval")
        items = case.get("alert_rule_test") or []
        self.horizon = max((eval_time(a.get("eval_time", 0)) for a in items), default=0.0)
        self.steps = int(self.horizon // self.interval) + 2
        self.series: list[Series] = []
        self.entities: list[Entity] = []
        self.gauges: dict[tuple[str, int], list[float | None]] = {}  # dcgm-exporter's last XID per GPU

    def gap(self, out: PromtoolTests, item: dict[str, Any], reason: str) -> None:
        out.gaps.append(
            Gap(self.source, self.index, str(item.get("alertname")), str(item.get("eval_time")), reason)
        )

    # -- inputs --------------------------------------------------------------------------------------------------

    def case_gap(self) -> str | None:
        if self.case.get("input_nccl_runs"):
            return "NCCL runs: fleettool judges them from its store; no Prometheus series carries them"
        if self.case.get("input_files"):
            return "recorded files (input_files): fleettool's readers ingest them; promtool reads input_series only"
        return None

    def load_series(self) -> None:
        fleettool = self.ex.names == "fleettool"
        merged: dict[tuple[str, tuple[tuple[str, str], ...]], Series] = {}
        for s in self.case.get("input_series") or []:
            name, labels = parse_series(s["series"])
            if "hostname" in labels:
                labels[NODE] = labels.pop("hostname")
            mm = metric_of(name)
            if mm is None:
                raise ValueError(f"{self.source}: unknown series name {name!r}")
            metric, factor = mm
            try:
                ser = self.names.series(metric)
            except Exception:  # noqa: BLE001 - a metric this name set lacks: no rule over it is exported
                continue
            vals = expand_values(s["values"])
            if not fleettool:
                vals = [None if v is None else v * factor * ser.per_unit for v in vals]
                sub = next((k for k in ("link", "collector", "mig") if k in labels), None)
                # dcgm-exporter's NVLink counters are the GPU's totals: its links are summed below
                if sub is not None and ser.sub != sub:
                    labels.pop(sub)
                if "gpu" in labels:
                    labels = dcgm_identity(labels.get(NODE, "node"), labels["gpu"]) | {
                        k: v for k, v in labels.items() if k not in ("gpu", NODE)
                    }
                name = _first_name(ser.sel)
            key = (name, tuple(sorted(labels.items())))
            if key in merged:
                old = merged[key].values
                merged[key].raw = None
                merged[key].values = [
                    None if a is None and b is None else (a or 0.0) + (b or 0.0)
                    for a, b in zip(old, vals, strict=False)
                ]
            else:
                merged[key] = Series(metric, name, labels, vals, str(s["values"]) if fleettool else None)
        self.series = list(merged.values())

    def load_events(self) -> None:
        lines: dict[tuple[str, int | None, str, int | None], list[dict[str, Any]]] = {}
        for e in self.case.get("input_events") or []:
            node = str(e.get(NODE, e.get("hostname", "node")))
            gpu = int(e["gpu"]) if e.get("gpu") is not None else None
            code = int(e["code"]) if e.get("code") is not None else None
            line = {**e, "t": parse_duration(e.get("at", 0), "at")}
            lines.setdefault((node, gpu, str(e.get("kind", "xid")), code), []).append(line)
        self.entities = [
            Entity(n, g, k, c, tuple(sorted(ls, key=lambda x: x["t"]))) for (n, g, k, c), ls in lines.items()
        ]
        if not self.entities:
            return
        if self.names.events is not None:
            counts: dict[tuple[str, str, int | None], list[float]] = {}
            for ent in self.entities:
                for ln in ent.lines:
                    counts.setdefault((ent.node, ent.kind, ent.code), []).append(ln["t"])
            for (node, kind, code), times in counts.items():
                vals: list[float | None] = []
                for i in range(self.steps):
                    n = sum(1 for t in times if self._step(t) <= i)
                    vals.append(float(n) if n else None)  # the agent creates the counter at the first line
                labels = {NODE: node, "kind": kind} | ({"code": str(code)} if code is not None else {})
                self.series.append(Series("", self.names.events, labels, vals))
            return
        # dcgm-exporter: the last XID of each GPU, 0 until its first; of two lines in one scrape, the later shows
        last: dict[tuple[str, int], list[tuple[float, int, int]]] = {}
        for order, e in enumerate(self.case.get("input_events") or []):
            if e.get("kind", "xid") == "xid" and e.get("gpu") is not None and e.get("code") is not None:
                node = str(e.get(NODE, e.get("hostname", "node")))
                t = parse_duration(e.get("at", 0), "at")
                last.setdefault((node, int(e["gpu"])), []).append((t, order, int(e["code"])))
        x = _first_name(self.names.series("xid_last").sel)
        for (node, gpu), evs in last.items():
            evs.sort()
            gauge: list[float | None] = []
            for i in range(self.steps):
                seen = [c for t, _, c in evs if self._step(t) <= i]
                gauge.append(float(seen[-1]) if seen else 0.0)
            self.gauges[(node, gpu)] = gauge
            self.series.append(Series("xid_last", x, dcgm_identity(node, str(gpu)), gauge))

    def _step(self, t: float) -> int:
        """The sample in which a line at time t is first seen: the next scrape at or after it."""
        return math.ceil(t / self.interval - 1e-9)

    def input_series(self) -> list[dict[str, str]]:
        return [{"series": s.text(), "values": s.raw or values_text(s.values)} for s in self.series]

    # -- expectations --------------------------------------------------------------------------------------------

    def translate(self, out: PromtoolTests) -> list[dict[str, Any]]:
        items = self.case.get("alert_rule_test") or []
        why = self.case_gap()
        if why:
            for it in items:
                self.gap(out, it, why)
            return []
        self.load_series()
        self.load_events()
        res: list[dict[str, Any]] = []
        for it in items:
            name = str(it.get("alertname"))
            rule = self.by_name.get(name)
            if rule is None:
                self.gap(out, it, f"no rule named {name} in the rules exported")
                continue
            why = self.ex.reason(name)
            if why is not None:
                self.gap(out, it, f"not expressible over the {self.ex.names} names: {why}")
                continue
            t = eval_time(it.get("eval_time", 0))
            exps = [
                {k: str(v) for k, v in (e.get("exp_labels") or {}).items()}
                for e in it.get("exp_alerts") or []
            ]
            for e in exps:
                if "hostname" in e:
                    e[NODE] = e.pop("hostname")
            if rule.kind == "event":
                got = self.events_expected(out, it, rule, t, exps)
            else:
                got = self.series_expected(out, it, rule, exps)
            for alert, alerts in got.items():
                res.append(self.item(out, alert, t, alerts))
        return res

    def item(self, out: PromtoolTests, alert: str, t: float, alerts: list[dict[str, str]]) -> dict[str, Any]:
        exported = next(e for e in self.ex.exported if e.item["alert"] == alert)
        # one series, one alert (on dcgm-exporter's names, an NVLink total is one series for all links)
        uniq = {tuple(sorted(a.items())): a for a in alerts}
        exp = []
        for a in uniq.values():
            ann = {k: render(v, a) for k, v in exported.item["annotations"].items()}
            out.summaries.setdefault(alert, set()).add(ann["summary"])
            exp.append({"exp_labels": a, "exp_annotations": ann})
        (out.firing if exp else out.quiet).add(alert)
        out.cases += 1
        return {"eval_time": dur(t), "alertname": alert, "exp_alerts": exp}

    def series_expected(
        self, out: PromtoolTests, it: dict[str, Any], rule: Rule, exps: list[dict[str, str]]
    ) -> dict[str, list[dict[str, str]]]:
        (exported,) = [e for e in self.ex.exported if e.rule.alert == rule.alert]
        labels = exported.item["labels"]
        ser = self.names.series(rule.p("metric"))
        alerts = []
        for e in exps:
            judged = {k: e.get(k) for k in ("severity", "category", "action")}
            if judged != labels:
                self.gap(
                    out,
                    it,
                    f"fleettool judges this finding {_cls(judged)}; the exported rule's labels are "
                    f"static ({_cls(labels)})",
                )
                return {}
            match = [
                s
                for s in self.series
                if s.metric == rule.p("metric")
                and s.labels.get(NODE) == e.get(NODE)
                and s.labels.get("gpu") == e.get("gpu")
                and (ser.sub is None or s.labels.get(ser.sub) == e.get(ser.sub))
            ]
            if not match and e.get("gpu") is None and (ser.sub is None or ser.sub not in e):
                # a node's alert over its sub-series (a count of its ports): the alert carries the node alone
                match = [
                    s
                    for s in self.series
                    if s.metric == rule.p("metric") and s.labels.get(NODE) == e.get(NODE)
                ]
                if match:
                    alerts.append({NODE: str(e.get(NODE))} | labels)
                    continue
            if len(match) != 1:
                self.gap(out, it, f"no single input series of {rule.p('metric')} for the expected alert {e}")
                return {}
            alerts.append(match[0].labels | labels)
        return {rule.alert: alerts}

    def events_expected(
        self, out: PromtoolTests, it: dict[str, Any], rule: Rule, t: float, exps: list[dict[str, str]]
    ) -> dict[str, list[dict[str, str]]]:
        mine = [e for e in self.ex.exported if e.rule.alert == rule.alert]
        got: dict[str, list[dict[str, str]]] = {e.item["alert"]: [] for e in mine}
        blocked: set[str] = set()
        kinds = set(rule.p("events") or ["xid"])
        codes = {int(c) for c in rule.p("codes") or []}
        cands = [
            c
            for c in self.entities
            if c.kind in kinds and (not codes or c.code in codes) and c.lines[0]["t"] <= t
        ]
        used: set[int] = set()
        for e in exps:
            judged = {k: e.get(k, "") for k in ("severity", "category", "action")}
            mine_c = [
                i
                for i, c in enumerate(cands)
                if i not in used and c.node == e.get(NODE) and ("gpu" not in e or str(c.gpu) == e["gpu"])
            ]
            if not mine_c:
                self.gap(out, it, f"no event line of the case matches the expected alert {e}")
                continue
            by_code = [i for i in mine_c if len(mine) == 1 or _class(cands[i]) == judged]
            i = (by_code or mine_c)[0]
            used.add(i)
            c = cands[i]
            alert = (
                class_alert(rule.alert, judge(c.code)) if len(mine) > 1 and c.code is not None else rule.alert
            )
            static = next(x.item["labels"] for x in mine if x.item["alert"] == alert)
            if static != judged:
                blocked.add(alert)
                self.gap(out, it, self.judged_by_line(c, judged, static))
                continue
            held = self.held_past_keep(c, rule, t)
            if held is not None:
                blocked.add(alert)
                self.gap(out, it, held)
                continue
            seen = self.seen_as(c, t)
            if isinstance(seen, str):
                self.gap(out, it, seen)
                continue
            got[alert].append(seen | static)
        return {a: al for a, al in got.items() if a not in blocked}

    def held_past_keep(self, c: Entity, rule: Rule, t: float) -> str | None:
        """Why an expectation of a held hardware fault past keep_firing_for has no PromQL form, or None."""
        lines = [ln for ln in c.lines if ln["t"] <= t]
        if not lines or c.code is None and c.kind != "fell-off-bus":
            return None
        last = lines[-1]
        hold = hold_of(c.kind, c.code, dict(last.get("detail") or {}))
        if hold is None or t < last["t"] + rule.keep_s:
            return None
        return (
            f"fleettool holds this {hold} fault until the action it asks for is seen (a boot, a GPU reset, "
            f"a new GPU, a proven return); a count per code ends keep_firing_for ({dur(rule.keep_s)}) after "
            "the line"
        )

    def judged_by_line(self, c: Entity, judged: dict[str, str], static: dict[str, str]) -> str:
        last = c.lines[-1]
        detail = dict(last.get("detail") or {})
        if c.kind == "xid" and c.code is not None and _cls(_labels(judge(c.code, detail))) != _cls(static):
            return (
                f"XID {c.code}'s class comes from its line ({', '.join(f'{k}: {v}' for k, v in detail.items())}"
                f"): fleettool judges it {_cls(judged)}; a count per code pages {_cls(static)}"
            )
        return (
            f"fleettool escalates this finding to {_cls(judged)} (the policy's repeats across reboots or "
            f"bursts); a count per code pages {_cls(static)}"
        )

    def seen_as(self, c: Entity, t: float) -> dict[str, str] | str:
        """The labels of the series an entity's lines (up to time t) show up in, or why they do not show."""
        if self.names.events is not None:
            return {NODE: c.node, "kind": c.kind} | ({"code": str(c.code)} if c.code is not None else {})
        if c.gpu is None or c.code is None:
            return "an XID line with no GPU: dcgm-exporter's last-XID gauge is per GPU"
        vals = self.gauges[(c.node, c.gpu)][: self._step(t) + 1]
        lines = [ln for ln in c.lines if ln["t"] <= t]
        first = self._step(lines[0]["t"])
        # a change is what the exported rule sees; the first sample of a series changes nothing
        changes = [i for i in range(max(first, 1), len(vals)) if vals[i] == c.code and vals[i - 1] != c.code]
        if not changes:
            return (
                f"XID {c.code} shows in no change of dcgm-exporter's last-XID gauge (another XID replaced it "
                "before the next scrape, or it is the series' first sample)"
            )
        if len(changes) < len(lines):
            return (
                f"XID {c.code} repeats on the same GPU: dcgm-exporter's last-XID gauge does not change for a "
                "repeat, so Prometheus sees its first line only"
            )
        return dcgm_identity(c.node, str(c.gpu))


def _first_name(sel: str) -> str:
    """A series name for a selector: the name itself, or the first of the aliases a regex matches."""
    return sel.split('"')[1].split("|")[0] if sel.startswith("{") else sel


def _labels(j: Any) -> dict[str, str]:
    return {"severity": j.severity.value, "category": j.category.value, "action": j.action.value}


def _class(c: Entity) -> dict[str, str]:
    return _labels(judge(c.code)) if c.code is not None else {}


def _cls(d: dict[str, Any]) -> str:
    return f"{d.get('severity')}/{d.get('category')}/{d.get('action')}"
