"""event: event lines of the given kinds (and codes), XIDs judged by the catalog policy.

Each line is active at its time, then inactive just after, so the alert fires at once and stays for
keep_firing_for; a line saying the GPU is gone (XID 79, fallen off the bus) holds while the GPU stays gone and
ends when it is back (kinds/_held.py). `refine` judges each finding by its last line: an XID by the catalog (fleettool.xid_catalog),
escalated when it recurs across reboots or bursts; an SXID by its fatal/nonfatal severity.

    kind: event
    events: [xid]
    codes: [79]                  # optional: every code when left out
    what: [link-down]            # optional: only lines whose detail.what is one of these (NIC lines)
    use_xid_policy: true         # false: the rule's own severity, category and action
"""

from __future__ import annotations

import functools
import json
from typing import Any

from fleettool.engine.kinds._base import Entity, Kind, KindResult, RuleLike, Verdict
from fleettool.engine.kinds._closing import Evidence
from fleettool.engine.kinds._event_runs import TAG, Lines, big_entities, foldable, marks
from fleettool.engine.kinds._event_runs import runs as run_lines
from fleettool.engine.kinds._held import episode, hold_of, older_sql
from fleettool.engine.kinds._horizon import Horizons
from fleettool.engine.kinds._promql import (
    EVENT_WINDOW,
    GPU_ON,
    LABEL,
    Names,
    NotExpressible,
    PromAlert,
    fills,
    first_appearance,
    in_codes,
)
from fleettool.engine.kinds._sql import epoch, read, ts_param
from fleettool.model import Action, Severity
from fleettool.store import Store
from fleettool.xid_catalog import Judgement, catalog, judge

Held = tuple[float, float | None, str, str | None, str | None]  # a held line: ts, value, hold, PCI id, UUID

# where an XID's findings join other findings of the same GPU
INCIDENT_OF_CATEGORY = {
    "ecc": "memory",
    "row-remap": "memory",
    "gpu-lost": "lost",
    "nvlink": "nvlink",
    "pcie": "pcie",
    "thermal": "clocks",
    "power": "clocks",
    "xid": "xid",
}
SXID_SEVERITY = {"fatal": (Severity.CRITICAL, Action.RESET_GPU), "nonfatal": (Severity.INFO, Action.NONE)}


def evaluate(store: Store, r: RuleLike, start: float, end: float) -> KindResult:
    kinds = list(r.p("events") or ["xid"])
    codes = r.p("codes")
    q = (
        "SELECT ts, node, gpu, uuid, pci_bus_id, kind, code, message, detail::VARCHAR AS detail FROM events "
        "WHERE kind IN (SELECT unnest($kinds)) AND (ts IS NULL OR ts BETWEEN $start AND $end)"
    )
    params: dict[str, Any] = {"kinds": kinds, "start": ts_param(start), "end": ts_param(end)}
    if codes:
        q += " AND code IN (SELECT unnest($codes))"
        params["codes"] = [int(c) for c in codes]
    if r.p("what"):
        q += " AND json_extract_string(detail, '$.what') IN (SELECT unnest($whats))"
        params["whats"] = [str(w) for w in r.p("what")]
    where = q.split(" FROM events WHERE ", 1)[1]
    # an entity of many lines (a storm) is folded into runs in SQL (kinds/_event_runs.py); the rest line by line
    big = big_entities(store, where, params) if foldable(r) else []
    mine = f" AND NOT list_contains($big, {TAG})" if big else ""
    # ties in the log's own order (rowid: the order the lines were stored in)
    rows = read(store, q + mine + " ORDER BY node, gpu, ts, rowid", {**params, "big": big} if big else params)
    older = older_sql(kinds, params.get("codes"))
    if older is not None:  # held lines before the window, while their GPU may still be gone
        q = q.replace("(ts IS NULL OR ts BETWEEN $start AND $end)", older)
        rows = [
            *read(
                store,
                f"SELECT * FROM ({q}) QUALIFY row_number() OVER "
                "(PARTITION BY node, gpu, kind, code ORDER BY ts DESC) = 1 ORDER BY node, gpu, ts",
                {k: v for k, v in params.items() if k != "end"},
            ),
            *rows,
        ]
    res = KindResult()
    held: dict[Entity, list[Held]] = {}
    for row in rows:
        kind, code, detail = row["kind"], row["code"], row["detail"]
        t = epoch(row["ts"]) if row["ts"] is not None else end
        key = f"{kind}:{code}" if code is not None else kind
        if row["gpu"] is None and row["pci_bus_id"]:  # no index known (a plain dmesg): one entity per PCI id
            key += f"@{row['pci_bus_id']}"
        ent = (row["node"], row["gpu"], key)
        ex = res.extra.setdefault(ent, {"events": []})
        ex["events"].append(
            {
                "ts": t,
                "kind": kind,
                "code": code,
                "message": row["message"],
                "pci_bus_id": row["pci_bus_id"],
                "uuid": row["uuid"],
                "detail": json.loads(detail) if detail else {},
            }
        )
        lst = res.obs.setdefault(ent, [])
        value = float(code) if code is not None else None
        hold = hold_of(kind, code, ex["events"][-1]["detail"]) if row["ts"] is not None else None
        if hold is not None:
            held.setdefault(ent, []).append((t, value, hold, row["pci_bus_id"], row["uuid"]))
            continue
        lst.append((t, True, value))
        lst.append((t + 1.0, False, None))
    if big:
        _fold(res, run_lines(store, where, params, big, float(r.keep_s)))
    if held:
        _hold(store, res, held, start, end)
    if "xid" in kinds and r.p("use_xid_policy", True):
        _history(store, res, params.get("codes"), start, end)
    for obs in res.obs.values():
        obs.sort(key=lambda o: (o[0], not o[1]))
    return res


def _hold(
    store: Store,
    res: KindResult,
    held: dict[Entity, list[Held]],
    start: float,
    end: float,
) -> None:
    """The observations of held lines (kinds/_held.py): each active from its line until the evidence its action
    asks for (ending there, with no keep_firing_for), or to its node's horizon while open. `extra["held_ends"]`
    maps each closing time to what closed it (engine/evaluate.py names each finding's)."""
    boots: dict[str, list[float]] = {}
    horizons = Horizons(store, end)
    for ent, lines in held.items():
        node, gpu, _ = ent
        if node not in boots:
            got = read(
                store,
                "SELECT ts FROM events WHERE kind = 'boot' AND node = $n AND ts IS NOT NULL",
                {"n": node},
            )
            boots[node] = [epoch(r["ts"]) for r in got]
        pci = next((ln[3] for ln in lines if ln[3]), None)
        uuid = next((ln[4] for ln in lines if ln[4]), None)
        ev = Evidence(store, node, gpu, pci, uuid, boots[node], end)
        ends: dict[float | None, str] = {}
        for t, value, hold, _, _ in lines:
            ep = episode(ev, hold, t, value, (start, end), horizons.of(node))
            if ep is not None:
                res.obs[ent].extend(ep[0])
                ends[ep[2]] = ep[1]
        if not res.obs[ent]:  # only lines before the window, closed since
            del res.obs[ent]
            del res.extra[ent]
            continue
        res.extra[ent]["keep_s"] = 0.0
        res.extra[ent]["held_ends"] = ends


HISTORY_S = 30 * 86400.0  # how far back a repeat policy looks before the judged window (reboots, bursts)


@functools.cache
def repeat_codes() -> tuple[int, ...]:
    """The XID codes whose policy escalates repeats (judged by code alone)."""
    return tuple(c for c in sorted(catalog()) if judge(c).repeat is not None)


def _fold(res: KindResult, rows: list[dict[str, Any]]) -> None:
    """The runs of the folded entities (kinds/_event_runs.py): three observations a run, the last KEEP lines
    of each as line dicts, each run's count."""
    for row in rows:
        ent = (row["node"], row["gpu"], row["key"])
        ex = res.extra.setdefault(ent, {"events": [], "lines": Lines()})
        t, code = epoch(row["ts"]), row["code"]
        ex["events"].append(
            {
                "ts": t,
                "kind": row["kind"],
                "code": code,
                "message": row["message"],
                "pci_bus_id": row["pci_bus_id"],
                "uuid": row["uuid"],
                "detail": json.loads(row["detail"]) if row["detail"] else {},
            }
        )
        runs = ex["lines"].runs
        t0, t1 = epoch(row["t0"]), epoch(row["t1"])
        if runs and runs[-1][0] == t0:
            continue
        runs.append((t0, t1, int(row["n"])))
        value = float(code) if code is not None else None
        lst = res.obs.setdefault(ent, [])
        lst.append((t0, True, value))
        if t1 > t0:
            lst.append((t1, True, value))
        lst.append((epoch(row["off"]), False, None))


def _history(store: Store, res: KindResult, codes: list[int] | None, start: float, end: float) -> None:
    """What a repeat policy needs of the lines of codes with one, from HISTORY_S before the window to its end
    (kinds/_event_runs.py marks), per entity judged now, so a repeat is judged with its history whatever the
    window: the agent's trailing lookback (70 min for XIDs) never saw the earlier bursts or boots, replay's
    whole range did."""
    want = [c for c in repeat_codes() if not codes or c in codes]
    if not want:
        return
    for ent, m in marks(store, want, start, end, start - HISTORY_S).items():
        if ent in res.obs:  # only the entities judged now need their past
            got = res.extra[ent].setdefault("lines", Lines())
            got.bursts, got.epochs, got.last_before = m.bursts, m.epochs, m.last_before


def refine(r: RuleLike, first_seen: float, last_seen: float, extra: dict[str, Any], v: Verdict) -> None:
    """The finding's lines as evidence; its severity, category, action and incident from its last line."""
    lines: Lines = v.evidence.pop("lines", None) or Lines()
    evs = [e for e in extra.get("events", []) if first_seen - 1 <= e["ts"] <= last_seen + 1]
    count = lines.count(first_seen, last_seen) if lines.runs else len(evs)  # folded: only some lines kept
    v.evidence["events"] = evs[-20:]
    v.evidence["event_count"] = count
    last = evs[-1] if evs else None
    if last is None:
        return
    if v.evidence.get("held"):  # a held fault is judged by its holding line, not by the line that closed it
        holding = [e for e in evs if hold_of(e["kind"], e["code"], e.get("detail") or {}) is not None]
        last = holding[-1] if holding else last
    v.summary_kw.update(code=last["code"], message=last["message"][:120], count=count)
    if last["kind"] == "xid" and r.p("use_xid_policy", True):
        j = judge(int(last["code"]), last.get("detail") or {})
        v.severity, v.category, v.action = j.severity, j.category, j.action
        v.summary_kw["name"] = j.name
        v.evidence["judgement"] = j.reason
        v.incident = INCIDENT_OF_CATEGORY.get(j.category.value, "xid")
        # repeats up to this finding's last line, never after it (a whole replay's range holds the future too)
        esc = _escalation(j, lines, extra.get("events", []), last_seen + 1)
        if esc is not None:
            v.severity, v.action, why = esc
            v.evidence["escalated"] = why
    elif last["kind"] == "sxid":
        v.severity, v.action = SXID_SEVERITY.get(
            str((last.get("detail") or {}).get("sxid_severity")),
            (Severity.WARNING, Action.INSPECT_HARDWARE),
        )
    if v.summary_kw.get("gpu") == "-" and last.get("pci_bus_id"):  # no index known: the GPU by its PCI id,
        v.summary_kw["gpu"] = f"at {last['pci_bus_id']}"  # and its own incident (two GPUs' XIDs never fold)
        v.incident = f"{v.incident}@{last['pci_bus_id']}"


def _escalation(
    j: Judgement, lines: Lines, evs: list[dict[str, Any]], upto: float
) -> tuple[Severity, Action, str] | None:
    """The repeat policy over the entity's lines up to `upto` (history included): the boot epochs they span,
    and the bursts (lines more than the policy's gap apart) within its window before the last of them."""
    rep = j.repeat
    before = [] if lines.last_before is None else [lines.last_before]
    times = [e["ts"] for e in evs if e["ts"] <= upto] + before
    if rep is None or not times:
        return None
    last = max(times)
    if rep.reboots is not None:
        epochs = {n for t, n in lines.epochs if t <= upto}
        if len(epochs) >= rep.reboots + 1:
            return rep.severity, rep.action, f"seen in {len(epochs)} boots: {rep.reason}"
    if rep.incidents is not None:  # on one place: the GPU, or (XID 13) one GPC/TPC of it
        within = rep.within_s or float("inf")
        recent: dict[str, int] = {}
        for t, place in lines.bursts:
            if t <= upto and last - t <= within:
                recent[place] = recent.get(place, 0) + 1
        place, n = max(recent.items(), key=lambda pn: (pn[1], pn[0]), default=("", 0))
        if n >= rep.incidents:
            on = f" on {place}" if place else ""
            return rep.severity, rep.action, f"{n} separate bursts{on}: {rep.reason}"
    return None


def class_alert(alert: str, j: Judgement) -> str:
    """The Prometheus name of one XID class: GpuXid + CriticalRebootNodeGpulost."""
    act = "".join(w.capitalize() for w in j.action.value.split("-"))
    return f"{alert}{j.severity.value.capitalize()}{act}{j.category.value.replace('-', '').capitalize()}"


def xid_classes(r: RuleLike) -> list[tuple[Judgement, list[int], bool]]:
    """The catalog policy's classes: (a judgement of the class, its codes, whether codes outside the catalog
    fall in it too), in a stable order. Judged by code alone: what a counter or a gauge of codes can carry."""
    want = {int(c) for c in r.p("codes") or []}
    classes: dict[tuple[str, str, str], tuple[Judgement, list[int]]] = {}

    def key(j: Judgement) -> tuple[str, str, str]:
        return j.severity.value, j.action.value, j.category.value

    for code in sorted(want or set(catalog())):
        j = judge(code)
        classes.setdefault(key(j), (j, []))[1].append(code)
    # with every code: the codes a newer driver adds go where the policy puts a code it does not know
    unknown = None if want else key(judge(-1))
    if unknown is not None and unknown not in classes:
        classes[unknown] = (judge(-1), [])
    return [(j, cs, k == unknown) for k, (j, cs) in sorted(classes.items())]


def promql(r: RuleLike, names: Names) -> list[PromAlert] | PromAlert:
    """Event lines as series: on fleettool's names, `fleettool_events_total{Hostname, kind, code}`, a counter the
    agent creates at a node's first line of a kind and code; on dcgm-exporter's, the last XID of each GPU
    (DCGM_FI_DEV_XID_ERRORS), the only event it exports. XIDs judged by the catalog policy are one rule per class
    (severity, action, category), judged by the code: what the line adds (an NVLink unit's fatal/non-fatal, XID
    154's recovery action) and repeats across reboots are judged by fleettool only."""
    kinds = list(r.p("events") or ["xid"])
    codes = [int(c) for c in r.p("codes") or []]
    policy = kinds == ["xid"] and r.p("use_xid_policy", True)
    if r.p("what"):
        raise NotExpressible(
            "the line's meaning (detail.what) is not a label of fleettool_events_total, which counts kind and code"
        )
    if "sxid" in kinds:
        raise NotExpressible(
            "an SXid's severity comes from its line (fatal or non-fatal), which a count per code does not carry"
        )
    if "xid" in kinds and len(kinds) > 1 and r.p("use_xid_policy", True):
        raise NotExpressible("XIDs judged by the policy mixed with other event kinds in one rule")
    if names.events is None:
        if kinds != ["xid"]:
            raise NotExpressible(
                f"dcgm-exporter exports no series for {', '.join(kinds)} lines (fleettool reads them from the kernel log)"
            )
        return _dcgm_xid(r, names, codes, policy)
    ev = names.events
    f = fills(None, value=None, gpu=False)
    f["code"] = LABEL % "code"

    def fires(sel: str) -> str:
        return f"increase({sel}[{EVENT_WINDOW}]) > 0 or {first_appearance(sel)}"

    if not policy:
        code = f',code=~"{"|".join(map(str, codes))}"' if codes else ""
        return PromAlert(fires(f'{ev}{{kind=~"{"|".join(kinds)}"{code}}}'), f)
    out = []
    every = "|".join(map(str, sorted(catalog())))
    for j, cs, unknown in xid_classes(r):
        sels = [f'{ev}{{kind="xid",code=~"{"|".join(map(str, cs))}"}}'] if cs else []
        if unknown:
            sels.append(f'{ev}{{kind="xid",code!~"{every}"}}')
        labels = {"severity": j.severity.value, "category": j.category.value, "action": j.action.value}
        out.append(PromAlert(" or ".join(fires(s) for s in sels), f, class_alert(r.alert, j), labels))
    return out


def _dcgm_xid(r: RuleLike, names: Names, codes: list[int], policy: bool) -> list[PromAlert] | PromAlert:
    """DCGM_FI_DEV_XID_ERRORS is a gauge of the GPU's last XID code (0 until the first): an XID is a change of
    the GPU's value. Newer dcgm-exporters add err_code/err_msg labels, so a new code is a new series: the change
    is taken on the GPU's maximum over its series, which also ignores an exporter restart (a new instance label)
    and a first scrape. The same code twice in a row, or two XIDs between scrapes, change nothing: fleettool
    counts every line of the kernel log."""
    x = names.series("xid_last").sel
    changed = f"changes((max by ({GPU_ON}) ({x}))[{EVENT_WINDOW}:1m]) > 0"
    f = fills(None, value=None)
    f["code"] = "{{ $value }}"
    if not policy:
        return PromAlert(f"{in_codes(x, codes) if codes else f'{x} > 0'} and on({GPU_ON}) {changed}", f)
    top = max(catalog())
    others = [c for c in range(1, top + 1) if c not in catalog()]
    out = []
    for j, cs, unknown in xid_classes(r):
        sel = in_codes(x, cs + (others if unknown else []), top if unknown else None)
        labels = {"severity": j.severity.value, "category": j.category.value, "action": j.action.value}
        out.append(PromAlert(f"{sel} and on({GPU_ON}) {changed}", f, class_alert(r.alert, j), labels))
    return out


KIND = Kind(
    name="event",
    fields=frozenset({"events", "codes", "use_xid_policy", "what"}),
    evaluate=evaluate,
    promql=promql,
    refine=refine,
    needs_boots=True,
)
