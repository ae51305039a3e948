"""The live in-flight limit: a file whose content is the limit, re-read without restart.

The file is the downward-API projection of the pod annotation
``inference.slo-operator.io/inflight-limit``; the operator moves the limit by changing the
annotation, and the gateway applies each new value as it appears.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

# The gateway's logger: the limit file is the gateway's input, its warnings are the gateway's.
log = logging.getLogger("slo_runtime.gateway")


def parse_limit(text: str) -> int | None:
    """A positive integer, or None for empty/invalid content (keep the current limit)."""
    text = text.strip().strip('"')
    try:
        n = int(text)
    except ValueError:
        return None
    return n if n > 0 else None


async def watch_limit_file(path: str, interval_s: float, apply: Callable[[int], None],
                           stop: asyncio.Event) -> None:
    """Re-read the file's *content* every interval.

    kubelet refreshes downward-API volumes by swapping a symlink to a new directory, so
    an inotify watch on the old inode never fires; polling the content always sees it.
    """
    last: str | None = None
    while not stop.is_set():
        try:
            text = await asyncio.to_thread(Path(path).read_text)
        except OSError:
            text = None
        if text is not None and text != last:
            last = text
            n = parse_limit(text)
            if n is None:
                log.warning("Ignored in-flight limit file %s: %r is not a positive integer",
                            path, text[:64])
            else:
                apply(n)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
