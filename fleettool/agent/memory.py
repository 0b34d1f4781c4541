"""Keeping the agent's resident memory to what it uses, on glibc (elsewhere both calls do nothing).

- `limit_arenas()`: glibc gives each thread that allocates its own malloc arena (up to 8 per core), and freed
  memory stays in the arena it came from. The agent's threads (collectors, watchdog, /metrics, NVML events)
  allocate little but often, so each arena keeps its high-water mark. Two arenas is what the agent needs:
  the main thread's and one shared by the rest (M_ARENA_MAX, as MALLOC_ARENA_MAX=2 would set it).
- `trim()`: after a flush and its rules, DuckDB's and Python's freed blocks go back to the kernel
  (malloc_trim(0)); without it the rule pass's peak stays resident until the next one reuses it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Any

M_ARENA_MAX = -8  # mallopt parameter (malloc.h)


@functools.cache
def _libc() -> Any | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        lib = ctypes.CDLL(name)
        lib.mallopt  # noqa: B018 - glibc only; musl and macOS have neither call
        lib.malloc_trim  # noqa: B018
    except (OSError, AttributeError):
        return None
    return lib


def limit_arenas(n: int = 2) -> bool:
    """Cap glibc's malloc arenas at `n`; call before the threads start. True when it took effect."""
    lib = _libc()
    return bool(lib is not None and lib.mallopt(M_ARENA_MAX, n) == 1)


def trim() -> bool:
    """Hand freed heap memory back to the kernel. True when some was released."""
    lib = _libc()
    return bool(lib is not None and lib.malloc_trim(0) == 1)
