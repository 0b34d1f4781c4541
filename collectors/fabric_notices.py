"""What the fabric collector says once, as agent events (kind `agent`, source `fabric`), never once per poll:

- a device or port skipped (a virtual function; `--fabric-exclude`), when first seen;
- a state file or `carrier_changes` that cannot be read (again after it has read once more);
- counters that cannot be read (`N/A (no PMA)`, permission), one event per port and reason naming the files: their
  values are unknown, not 0;
- a counter file that fails with EINVAL: blocked (the collector reads it no more until the agent restarts), since
  on restricted ConnectX-7 functions every such read fails in the firmware's ACCESS_REG command and floods dmesg
  (prometheus/node_exporter#3434, leptonai/gpud#1164);
- a counter saturated at its width's maximum (`mlx5_1/1 counters/link_downed saturated at 255: its increments can
  no longer be seen`), again only after it has dropped below it (a reset) and saturated anew;
- a counter that dropped within this boot (someone reset the port's counters: `perfquery -R`); the rules read a
  drop as a reset too (increase()), this says it happened.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from fleettool.collectors.base import Collected
from fleettool.formats.ib_sysfs import IbPort
from fleettool.model import Event, EventKind

EINVAL_WHY = (
    "not read again until the agent restarts (on restricted ConnectX-7 functions each such read fails in the "
    "firmware's ACCESS_REG command and floods dmesg: node_exporter #3434, gpud #1164)"
)


class Notices:
    def __init__(self, node: str, boot_id: str = "") -> None:
        self.node = node
        self.boot_id = boot_id
        self.said: set[str] = set()  # keys of the notices given and still true
        self.blocked: set[str] = set()  # counter files failing with EINVAL: not read again
        self.last: dict[str, int] = {}  # counter file -> its last value (this boot), for resets

    def _event(self, now: float, msg: str, **detail: object) -> Event:
        return Event(
            now, self.node, EventKind.AGENT.value, f"fabric: {msg}", source="fabric", detail=dict(detail)
        )

    def once(self, out: Collected, now: float, key: str, msg: str, **detail: object) -> None:
        if key in self.said:
            return
        self.said.add(key)
        out.events.append(self._event(now, msg, **detail))

    def clear(self, key: str) -> None:
        self.said.discard(key)

    def is_blocked(self, path: str | Path) -> bool:
        return str(path) in self.blocked

    def skipped(self, out: Collected, now: float, name: str, why: str) -> None:
        self.once(out, now, f"skip:{name}", f"{name} not watched: {why}")

    def state_file(self, out: Collected, now: float, key: str, attr: str, path: str, why: str | None) -> None:
        k = f"read:{path}"
        if why is None:
            self.clear(k)
            return
        self.once(
            out, now, k, f"{key} {attr} unreadable: {why}; unknown until it reads", file=path, reason=why
        )

    def carrier(self, out: Collected, now: float, netdev: str, path: str, why: str | None) -> None:
        k = f"read:{path}"
        if why is None:
            self.clear(k)
            return
        self.once(out, now, k, f"netdev {netdev} carrier_changes unreadable: {why}", file=path, reason=why)

    def counters(self, out: Collected, now: float, port: IbPort, files: Mapping[str, Path]) -> None:
        """The notices of one port's counter read (`files`: `counters/<name>` -> path)."""
        unreadable: dict[str, list[str]] = {}  # reason -> keys not yet reported
        for d, counters in (("counters", port.counters), ("hw_counters", port.hw_counters)):
            for name, c in counters.items():
                key = f"{d}/{name}"
                path = str(files[key]) if key in files else key
                if c.value is None:
                    why = c.reason or "unreadable"
                    if "EINVAL" in why and path not in self.blocked:
                        self.blocked.add(path)
                        self.said.add(f"read:{path}")
                        msg = f"{port.key} {key} failed with invalid argument (EINVAL): {EINVAL_WHY}; unknown, not 0"
                        out.events.append(self._event(now, msg, file=path, reason=why))
                    elif f"read:{path}" not in self.said:
                        self.said.add(f"read:{path}")
                        unreadable.setdefault(why, []).append(key)
                    continue
                self.clear(f"read:{path}")
                self._saturation(out, now, port.key, key, path, c.value, c.saturated)
                self._reset(out, now, port.key, key, path, c.value)
        for why, keys in unreadable.items():
            msg = f"{port.key} {', '.join(keys)} unreadable ({why}): unknown, not 0"
            out.events.append(self._event(now, msg, files=[str(files.get(k, k)) for k in keys], reason=why))

    def _saturation(
        self, out: Collected, now: float, port: str, key: str, path: str, value: int, saturated: bool
    ) -> None:
        k = f"sat:{path}"
        if not saturated:
            self.clear(k)
            return
        self.once(
            out,
            now,
            k,
            f"{port} {key} saturated at {value}: its increments can no longer be seen",
            file=path,
            value=value,
        )

    def _reset(self, out: Collected, now: float, port: str, key: str, path: str, value: int) -> None:
        prev = self.last.get(path)
        self.last[path] = value
        if prev is not None and value < prev:
            msg = f"{port} {key} dropped from {prev} to {value}: the port's counters were reset"
            out.events.append(
                self._event(now, msg, file=path, before=prev, after=value, boot_id=self.boot_id)
            )
