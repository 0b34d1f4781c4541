"""What `fleettool remediate` ends with: proven, failed, stopped or refused, the message, the episode and the rungs
tried; its exit code (0 only when proven) and JSON form."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fleettool.remediate.model import Rung


@dataclass
class Outcome:
    state: str  # refused, proven, failed, stopped
    message: str
    remediation_id: str | None = None
    rung: Rung | None = None
    open: tuple[dict[str, Any], ...] = ()
    rungs: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 0 if self.state == "proven" else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "message": self.message,
            "remediation_id": self.remediation_id,
            "rung": str(self.rung) if self.rung else None,
            "rungs": self.rungs,
            "open": [{k: str(v) if v is not None else None for k, v in o.items()} for o in self.open],
        }
