"""Two or more operator replicas, one acting: kopf peering with start-time priorities.

kopf pauses every operator that sees a live peer of higher priority in the same peering
object, and pauses *all* of them when priorities tie, so replicas need distinct
priorities. The earliest-started replica gets the highest one: the incumbent keeps acting
through a rolling update instead of handing over to each new pod in turn. A replica that
stops cleanly removes itself from the peering object at once; one that dies is presumed
dead after ``lifetime`` seconds without a keep-alive, and the next replica resumes.
"""

from __future__ import annotations

from typing import Any

import kopf


def priority_from_start(started_unix: float) -> int:
    """kopf peering priority: earlier start (milliseconds) means higher priority."""
    return -int(started_unix * 1000)


def run_kwargs(
    peering: str | None, priority: int | None, lifetime_s: int, started_unix: float
) -> dict[str, Any]:
    """Keyword arguments for ``kopf.run``: standalone without a peering name."""
    if not peering:
        return {"standalone": True}
    settings = kopf.OperatorSettings()
    # Keep-alives go out every lifetime - 5..10 s, so a dead leader is noticed within it.
    settings.peering.lifetime = lifetime_s
    return {
        "standalone": False,
        "peering_name": peering,
        "priority": priority if priority is not None else priority_from_start(started_unix),
        "settings": settings,
    }
