"""An in-memory stand-in for the Kubernetes writes ``reconcile`` makes (KubeWriter)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from slo_operator.api.cluster import ApiRejected


@dataclass
class FakeKube:
    """Records every write; ``objects`` holds the last applied body by (kind, ns, name)."""

    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    applies: list[tuple[str, str]] = field(default_factory=list)
    pod_patches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    attempts: list[tuple[str, str]] = field(default_factory=list)
    refuse: dict[str, str] = field(default_factory=dict)  # kind -> the API server's message
    deletes: list[tuple[str, str, str]] = field(default_factory=list)
    refuse_delete: dict[str, str] = field(default_factory=dict)  # kind -> message
    refuse_status: int = 422  # the HTTP status of the refusals in ``refuse``

    def apply(self, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        self.attempts.append((obj["kind"], meta["name"]))
        if obj["kind"] in self.refuse:
            raise ApiRejected(obj["kind"], meta["name"], self.refuse_status,
                              self.refuse[obj["kind"]])
        self.objects[(obj["kind"], meta["namespace"], meta["name"])] = copy.deepcopy(dict(obj))
        self.applies.append((obj["kind"], meta["name"]))

    def delete(self, kind: str, namespace: str, name: str) -> None:
        if kind in self.refuse_delete:
            raise ApiRejected(kind, name, 403, self.refuse_delete[kind])
        self.deletes.append((kind, namespace, name))
        self.objects.pop((kind, namespace, name), None)

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        self.pod_patches.append((name, copy.deepcopy(dict(patch))))

    def patch_status(
        self, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> None:
        self.statuses.append(copy.deepcopy(dict(status)))

    def event(self, involved: Mapping[str, Any], event_type: str, reason: str, message: str,
              now: datetime) -> None:
        self.events.append((event_type, reason, message))

    @property
    def writes(self) -> int:
        return (len(self.applies) + len(self.pod_patches) + len(self.statuses)
                + len(self.events) + len(self.deletes))
