"""One incident (Enter on the incidents screen): what it is and why (its root, scope, key and `because`), and its
member alerts grouped by node with counts, the root's node first. l shows the alert list restricted to this
incident's alerts (with the list's actions); Enter on a node opens the node."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static

from fleettool.tui.messages import IncidentLoaded
from fleettool.tui.screens.base import DataScreen
from fleettool.tui.screens.node import NodeScreen
from fleettool.tui.tables import FitTable, fill
from fleettool.tui.text import Part, assemble, plain
from fleettool.tui.theme import SEV_STYLE

MEMBER_COLUMNS = ("node", "root", "alerts", "GPUs", "rules", "why")
MEMBER_DROP = ("rules", "GPUs")


def root_cell(r: dict[str, Any]) -> str:
    """An incident's root as node/GPU/XID ('-' for a part it lacks; an SXid as sxidN); '-' with no root."""
    if not r.get("root_alert"):
        return "-"
    gpu = "-" if r.get("root_gpu") is None else str(r["root_gpu"])
    code = r.get("root_code")
    xid = "-" if code is None else (f"sxid{-code}" if code < 0 else str(code))
    return f"{r.get('root_node') or '-'}/{gpu}/{xid}"


def gpu_ranges(gpus: Iterable[int | None]) -> str:
    """GPU indices as ranges ('0-3,6'); an alert with no GPU index (a node's, or a GPU known only by its PCI
    id) as '-'."""
    gpus = list(gpus)
    idx = sorted({g for g in gpus if g is not None})
    parts = ["-"] if any(g is None for g in gpus) else []
    i = 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        parts.append(str(idx[i]) if i == j else f"{idx[i]}-{idx[j]}")
        i = j + 1
    return ",".join(parts)


def members_by_node(members: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The members (incident_members rows) grouped by node: the root's GPU ('' when the root is elsewhere,
    'root' when its GPU has no index),
    the alerts, the GPUs, each rule with its count, the commonest reason. The root's node first, then the
    nodes with most alerts, then by name."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for m in members:
        groups.setdefault(m.get("node") or "?", []).append(m)
    out: list[dict[str, Any]] = []
    for node, ms in groups.items():
        roots = [m for m in ms if m["role"] == "root"]
        rules = Counter(m.get("rule") or "?" for m in ms)
        whys = Counter(m["reason"] for m in ms if m["role"] != "root" and m.get("reason"))
        out.append(
            {
                "node": node,
                "root": (
                    "" if not roots else ("root" if roots[0].get("gpu") is None else f"GPU {roots[0]['gpu']}")
                ),
                "alerts": len(ms),
                "gpus": gpu_ranges([m.get("gpu") for m in ms]),
                "rules": ", ".join(f"{r}×{n}" if n > 1 else r for r, n in rules.most_common()),
                "why": whys.most_common(1)[0][0] if whys else ("the root" if roots else ""),
            }
        )
    out.sort(key=lambda g: (not g["root"], -int(g["alerts"]), str(g["node"])))
    return out


class IncidentScreen(DataScreen):
    """One incident: its root and evidence, then its members by node."""

    shows_alerts = False  # the alert list's keys (a, s, r, /, n) are off here: FleetTui.check_action
    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("l", "alerts", "its alerts"),
    ]

    def __init__(self, incident_id: str) -> None:
        super().__init__()
        self.incident_id = incident_id
        self.incident: dict[str, Any] | None = None
        self.members: list[dict[str, Any]] = []
        self.groups: list[dict[str, Any]] = []

    def compose(self) -> ComposeResult:
        yield Header(show_clock=bool(getattr(self.app, "clock", True)))
        yield Static("", id="inchead")
        yield FitTable(id="members", cursor_type="row", zebra_stripes=True)
        yield Static("", id="memstatus")
        yield Footer()

    def on_mount(self) -> None:
        t = self.query_one("#members", DataTable)
        fill(t, MEMBER_COLUMNS, [])
        t.focus()
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, description="loading the incident")
    def load(self) -> None:
        from fleettool.store.incidents import incident_by_id, incident_members

        with self.source.open() as store:
            inc = incident_by_id(store, self.incident_id)
            members = incident_members(store, self.incident_id) if inc is not None else []
        self.post_message(IncidentLoaded(inc, members))

    def on_incident_loaded(self, msg: IncidentLoaded) -> None:
        self.incident, self.members = msg.incident, msg.members
        self.groups = members_by_node(self.members)
        head = self.query_one("#inchead", Static)
        inc = self.incident
        if inc is None:
            head.update(plain(f"incident {self.incident_id} is gone (a later fold replaced it)"))
        else:
            head.update(assemble(*self.head_parts(inc)))
        self.render_rows()

    def head_parts(self, inc: dict[str, Any]) -> list[Part]:
        """The head: severity, state, whether it paged, scope and key, action; the root; the counts and
        summary; one line per `because`."""
        root = "none (a storm without a cause)"
        if inc.get("root_alert"):
            gpu = "" if inc.get("root_gpu") is None else f" GPU {inc['root_gpu']}"
            code = inc.get("root_code")
            xid = "" if code is None else (f" SXid {-code}" if code < 0 else f" XID {code}")
            root = f"{inc['root_node']}{gpu}{xid} (alert {inc['root_alert']})"
        lines: list[Part] = [
            (inc["severity"], SEV_STYLE.get(inc["severity"], "")),
            f" {inc['state']}  ",
            ("PAGED" if inc["page"] else "no page", "bold" if inc["page"] else ""),
            f"  {inc['scope']} {inc['key'] or ''}".rstrip(),
            f"  action {inc['action']}\n" if inc.get("action") else "\n",
            ("root: ", "b"),
            root,
            f"\n{inc['nodes']} nodes, {inc['gpus']} GPUs, {inc['alerts']} alerts: ",
            inc["summary"] or "",
        ]
        for why in inc.get("because") or []:
            lines.append(f"\n  because {why}")
        return lines

    def render_rows(self) -> None:
        t = self.query_one("#members", DataTable)
        cells = [
            (g["node"], g["root"], str(g["alerts"]), g["gpus"], g["rules"], g["why"]) for g in self.groups
        ]
        width = (t.size.width or self.app.size.width) - t.styles.scrollbar_size_vertical
        fill(t, MEMBER_COLUMNS, cells, [g["node"] for g in self.groups], width=width, drop=MEMBER_DROP)
        roots = sum(1 for m in self.members if m["role"] == "root")
        n = len(self.members)
        self.query_one("#memstatus", Static).update(
            plain(
                f"{len(self.groups)} nodes, {n} alerts ({roots} root, {n - roots} members); "
                "Enter: the node, l: these alerts"
            )
        )

    def on_fit_table_resized(self) -> None:
        if self.groups:
            self.render_rows()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.app.push_screen(NodeScreen(str(event.row_key.value)))

    def action_alerts(self) -> None:
        """The alert list, only this incident's alerts (Esc there shows every alert again)."""
        show = getattr(self.app, "show_alerts", None)
        if show is not None:
            show({m["alert_id"] for m in self.members}, f"incident {self.incident_id}")
