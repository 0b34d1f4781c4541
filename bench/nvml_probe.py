"""Every read of the NVML source once per GPU, with its result or error and its cost: what this driver supports;
and its event path (the types registered per GPU, the wake fd, and the close that joins the waiter thread).

python bench/nvml_probe.py > probe.json
"""

from __future__ import annotations

import json
import select
import time

from fleettool.sources.base import READS, SourceError
from fleettool.sources.nvml import NvmlSource
from fleettool.sources.nvml_events import decode_mask


def main() -> None:
    src = NvmlSource()
    t0 = time.perf_counter()
    src.open()
    out: dict[str, object] = {
        "open_ms": round((time.perf_counter() - t0) * 1e3, 2),
        "driver": src.driver_version(),
    }
    n = src.device_count()
    out["count"] = n
    gpus = []
    for i in range(n):
        info = src.device_info(i)
        reads: dict[str, object] = {}
        for what in READS:
            for attempt in ("first", "second"):
                t = time.perf_counter()
                try:
                    rows = src.read(i, what, time.time())
                    res: object = {f"{m}{'{' + s + '}' if s else ''}": v for m, s, v in rows}
                except SourceError as e:
                    res = f"{type(e).__name__}: {e}"
                us = (time.perf_counter() - t) * 1e6
                entry = reads.setdefault(what, {})
                assert isinstance(entry, dict)
                entry[f"us_{attempt}"] = round(us, 1)
                entry["result"] = res
        gpus.append(
            {"index": i, "uuid": info.uuid, "name": info.name, "pci": info.pci_bus_id, "reads": reads}
        )
    out["gpus"] = gpus
    # the event path: what each GPU registered (its supported types ANDed with the wanted ones), the wake fd,
    # and what arrived within 2 s (PState/Clock are not registered, so an idle GPU shows nothing)
    out["events_registered"] = {i: decode_mask(m) for i, m in src.registered_events.items()}
    out["events_wait_fd"] = src.wait_fd()
    t = time.perf_counter()
    fd = src.wait_fd()
    woke = bool(fd is not None and select.select([fd], [], [], 2.0)[0])
    out["events_in_2s"] = [x.__dict__ for x in src.poll_events(time.time())] if woke else []
    out["events_wait_s"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    src.close()
    out["close_ms"] = round((time.perf_counter() - t) * 1e3, 1)
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
