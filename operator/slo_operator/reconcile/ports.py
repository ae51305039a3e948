"""The writes ``reconcile`` needs from Kubernetes, as a small protocol.

Reads come from a :class:`~slo_operator.api.cluster.Snapshot` (watch caches), so the
protocol holds writes only; ``adapters.kube.Kube`` implements it against the API server
and ``tests/operator/reconcile/fake.py`` against an in-memory fake. The planner reads the
:class:`AppliedCache` through :class:`AppliedView` only; the executor records in it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol


class KubeWriter(Protocol):
    """Writes to the API server (the adapter) or to memory (tests)."""

    def apply(self, obj: Mapping[str, Any]) -> None:
        """Server-side apply of one rendered object; raises ``ApiRejected`` on refusal."""

    def delete(self, kind: str, namespace: str, name: str) -> None:
        """Delete one owned object; raises ``ApiRejected`` on refusal (not when gone)."""

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch one pod's metadata; a pod that is gone is skipped."""

    def patch_status(
        self, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        """Merge-patch a custom resource's status subresource; an object that is gone
        is skipped."""

    def event(
        self, involved: Mapping[str, Any], event_type: str, reason: str, message: str,
        now: datetime,
    ) -> None:
        """Post one core/v1 Event on ``involved``; a refusal is logged, never raised."""


class ApiDiscovery(Protocol):
    """Which optional kinds the API server serves (a CRD the operator does not ship, such
    as the Gateway API Inference Extension's InferencePool). ``adapters.kube.Kube`` answers
    from API discovery, cached; tests answer from a value."""

    def serves(self, api_version: str, kind: str) -> bool:
        """True when the API server serves ``kind`` in ``api_version``."""


class AppliedView(Protocol):
    """What the planner reads of the :class:`AppliedCache` (nothing that changes it)."""

    def fresh(self, obj: Mapping[str, Any], now: float) -> bool:
        """True when ``obj`` equals what was applied lately."""

    def backoff(self, obj: Mapping[str, Any], now: float) -> str | None:
        """The API server's last refusal of this very object while its back-off runs."""

    def limit_sent(self, namespace: str, pod: str, limit: int, now: float) -> bool:
        """True when this very limit was patched onto the pod lately."""


# Seconds a pod's live-limit patch is taken as sent while the watch cache has not yet
# delivered it: a watch event arrives within a second or two on a healthy API server, and
# a refresh that owned objects ask for can come sooner than that. Longer than a pass, so a
# one-second pass (tests) does not send the same value twice; short enough that a limit
# someone else changes meanwhile is re-asserted soon.
LIMIT_ECHO_S = 30.0


def digest(obj: Mapping[str, Any]) -> str:
    """Stable hash of a rendered object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


@dataclass
class AppliedCache:
    """Hashes of what was last applied, so unchanged objects are not re-sent.

    The caller forgets an entry when the watch cache shows the object gone or drifted
    (the Deployment missing, or its replicas not the ones applied); every entry also
    expires after ``ttl`` seconds, so objects the operator does not watch (Service,
    PodDisruptionBudget) and other writers' edits are re-asserted within that time.
    """

    ttl: float = 600.0
    entries: dict[tuple[str, str, str], tuple[str, float]] = field(default_factory=dict)
    # key -> (digest, retry not before, attempts, message) of objects the API server refused.
    rejected: dict[tuple[str, str, str], tuple[str, float, int, str]] = field(
        default_factory=dict)
    # (namespace, pod) -> (live limit patched, when): see LIMIT_ECHO_S.
    limits: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)

    def limit_sent(self, namespace: str, pod: str, limit: int, now: float) -> bool:
        """True when ``limit`` was patched onto ``pod`` less than LIMIT_ECHO_S ago."""
        entry = self.limits.get((namespace, pod))
        return entry is not None and entry[0] == limit and now - entry[1] < LIMIT_ECHO_S

    def remember_limit(self, namespace: str, pod: str, limit: int, now: float) -> None:
        """``limit`` was patched onto ``pod`` at ``now``; entries past the echo window are
        dropped as new ones come (pods come and go)."""
        self.limits[(namespace, pod)] = (limit, now)
        if len(self.limits) > 256:
            for key in [k for k, (_, t) in self.limits.items() if now - t >= LIMIT_ECHO_S]:
                del self.limits[key]

    @staticmethod
    def key(obj: Mapping[str, Any]) -> tuple[str, str, str]:
        meta = obj["metadata"]
        return (str(obj["kind"]), str(meta.get("namespace", "")), str(meta["name"]))

    def fresh(self, obj: Mapping[str, Any], now: float) -> bool:
        """True when ``obj`` equals what was applied less than ``ttl`` ago."""
        entry = self.entries.get(self.key(obj))
        return entry is not None and entry[0] == digest(obj) and now - entry[1] < self.ttl

    def remember(self, obj: Mapping[str, Any], now: float) -> None:
        """``obj`` was applied at ``now``."""
        self.entries[self.key(obj)] = (digest(obj), now)
        self.rejected.pop(self.key(obj), None)

    def backoff(self, obj: Mapping[str, Any], now: float) -> str | None:
        """The API server's last refusal of this very object while its back-off runs."""
        entry = self.rejected.get(self.key(obj))
        if entry is None or entry[0] != digest(obj) or now >= entry[1]:
            return None
        return entry[3]

    def reject(self, obj: Mapping[str, Any], now: float, message: str) -> float:
        """Record a refusal; returns the back-off (30 s, doubling, at most 10 min)."""
        old = self.rejected.get(self.key(obj))
        attempts = old[2] + 1 if old is not None and old[0] == digest(obj) else 1
        delay = min(30.0 * float(2 ** (attempts - 1)), 600.0)
        self.rejected[self.key(obj)] = (digest(obj), now + delay, attempts, message)
        return delay

    def forget(self, kind: str, namespace: str, name: str) -> None:
        """Apply this object again on the next reconcile."""
        self.entries.pop((kind, namespace, name), None)

    def forget_prefix(self, kind: str, namespace: str, prefix: str) -> None:
        """Apply again every object of ``kind`` whose name starts with ``prefix`` (all the
        variants' Deployments of a service)."""
        for key in [k for k in self.entries
                    if k[0] == kind and k[1] == namespace and k[2].startswith(prefix)]:
            del self.entries[key]
