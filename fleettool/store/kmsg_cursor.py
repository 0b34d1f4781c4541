"""Where the store left off in a boot's kernel log, so the agent reads /dev/kmsg from its start and stores each
record once (collectors/kmsg.py; the why of the boot time is in sources/kmsg_boot.py).

Nothing new is written for it: every event the agent makes of a /dev/kmsg record carries that record's
`kmsg_seq` and `boot_id` in its detail, and the boot is a `boot` event carrying its `boot_id`, both written
with the events in the flush's own transaction. So the position cannot run ahead of what was stored (a kill
before a flush re-reads the unflushed records) nor behind it (a record stored is never read into an event
again). XIDs another source gave in this boot (NVML's event API) are listed too, with their wall time: the
kernel's line of the same XID, found in the backlog after a restart, is the same XID, which the live
de-duplication (agent/dedup.py) dropped before the restart.
"""

from __future__ import annotations

from pathlib import Path

from fleettool.sources.kmsg_boot import KmsgResume, read_boot_id, xid_gpu_key
from fleettool.store.db import Store
from fleettool.store.errors import StoreError, precheck
from fleettool.store.values import db_time, epoch

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
    boot_time = epoch(boot)
    others: list[tuple[int, str, float]] = []
    if boot_time is not None:  # no boot event: the agent never ran in this boot, so stored nothing of it
        for r in store.query(
            "SELECT code, pci_bus_id, gpu, ts FROM events WHERE node = ? AND kind = 'xid' "
            "AND coalesce(source, '') NOT LIKE 'kmsg%' AND code IS NOT NULL AND ts >= ? "
            f"ORDER BY ts DESC LIMIT {MAX_OTHER_XIDS}",
            [node, db_time(boot_time - 60.0)],
        ):
            key, t = xid_gpu_key(r["pci_bus_id"], r["gpu"]), epoch(r["ts"])
            if key is not None and t is not None:
                others.append((int(r["code"]), key, t))
    return KmsgResume(
        boot_id=boot_id,
        last_seq=None if seq is None else int(seq),
        boot_time=boot_time,
        other_xids=others,
    )


def this_boot_resume(db: Path, node: str) -> KmsgResume | None:
    """What the store at `db` holds of this machine's boot (its boot id), for `fleettool agent`'s kmsg
    collector; None when there is no store yet, no boot id, or the store cannot be read now (the whole ring
    buffer is then read; the agent's own open, later, says why the store could not be)."""
    boot_id = read_boot_id()
    if boot_id is None:
        return None
    try:
        precheck(str(db), read_only=True)
        with Store(db, read_only=True, wait_s=2.0) as st:
            return resume_point(st, node, boot_id)
    except StoreError:
        return None
