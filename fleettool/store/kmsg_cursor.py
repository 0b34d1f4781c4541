"""Where the store left off in a boot's kernel log, so the agent reads /dev/kmsg from its start and stores each
record once (collectors/kmsg.py; the why of the boot time is in sources/kmsg_boot.py).

Nothing new is written for it: every event the agent makes of a /dev/kmsg record carries that record's
`kmsg_seq` and `boot_id` in its detail, and the boot is a `boot` event carrying its `boot_id`, both written
with the events in the flush's own transaction. So the position cannot run ahead of what was stored (a kill
before a flush re-reads the unflushed records) nor behind it (a record stored is never read into an event
again). XIDs another source gave (NVML's event API: its reports carry the uptime at which the agent got them,
agent/dedup.py) are listed too: the kernel's line of the same XID, found in the backlog after a restart, is
the same XID, which the live de-duplication dropped before the restart.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from fleettool.sources.kmsg_boot import KmsgResume, xid_gpu_key

if TYPE_CHECKING:
    from fleettool.store.db import Store

MAX_OTHER_XIDS = 10_000


def resume_point(store: Store, node: str, boot_id: str) -> KmsgResume:
    """What `store` holds of `node`'s kernel log in the boot `boot_id`."""
    seq = store.scalar(
        "SELECT max(TRY_CAST(json_extract_string(detail, '$.kmsg_seq') AS BIGINT)) FROM events "
        "WHERE node = ? AND json_extract_string(detail, '$.boot_id') = ? AND kind <> 'boot'",
        [node, boot_id],
    )
    boot = store.scalar(
        "SELECT min(ts) FROM events WHERE node = ? AND kind = 'boot' "
        "AND json_extract_string(detail, '$.boot_id') = ?",
        [node, boot_id],
    )
    others: list[tuple[int, str, float]] = []
    for r in store.query(
        "SELECT code, pci_bus_id, gpu, TRY_CAST(json_extract_string(detail, '$.uptime') AS DOUBLE) AS up "
        "FROM events WHERE node = ? AND kind = 'xid' AND coalesce(source, '') NOT LIKE 'kmsg%' "
        "AND json_extract_string(detail, '$.boot_id') = ? AND code IS NOT NULL "
        f"ORDER BY ts DESC LIMIT {MAX_OTHER_XIDS}",
        [node, boot_id],
    ):
        key = xid_gpu_key(r["pci_bus_id"], r["gpu"])
        if key is not None and r["up"] is not None:
            others.append((int(r["code"]), key, float(r["up"])))
    return KmsgResume(
        boot_id=boot_id,
        last_seq=None if seq is None else int(seq),
        boot_time=None if boot is None else boot.replace(tzinfo=dt.timezone.utc).timestamp(),
        other_xids=others,
    )
