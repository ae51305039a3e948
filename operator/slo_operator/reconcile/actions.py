"""The writes one reconcile plans, as small immutable values.

``planner.plan_reconcile`` decides (pure) and returns these in the order they are to be
made; ``executor.execute`` performs them through the ``KubeWriter`` protocol. Keeping the
two apart lets the tests read what a reconcile *would* do without any client, and keeps
every API call in one short loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class ObjectRef:
    """The object an Event is about (what ``involvedObject`` needs, nothing more)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @staticmethod
    def of(body: Mapping[str, Any]) -> ObjectRef:
        meta = body["metadata"]
        return ObjectRef(str(body.get("apiVersion") or ""), str(body.get("kind") or ""),
                         str(meta["namespace"]), str(meta["name"]), str(meta.get("uid") or ""))

    def as_body(self) -> dict[str, Any]:
        """The shape ``KubeWriter.event`` reads."""
        return {"apiVersion": self.api_version, "kind": self.kind,
                "metadata": {"namespace": self.namespace, "name": self.name, "uid": self.uid}}


@dataclass(frozen=True)
class Apply:
    """Server-side apply of one rendered object (its rendering changed, drifted or expired)."""

    obj: Mapping[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj["kind"])

    @property
    def name(self) -> str:
        return str(self.obj["metadata"]["name"])


@dataclass(frozen=True)
class Delete:
    """Delete one owned object (a variant's Deployment no pool offers any more)."""

    kind: str
    namespace: str
    name: str


@dataclass(frozen=True)
class PatchPodLimit:
    """Set one running pod's live in-flight limit annotation (never the pod template)."""

    namespace: str
    pod: str
    limit: int


@dataclass(frozen=True)
class PatchStatus:
    """Write a custom resource's status subresource (planned only when it changed)."""

    kind: str
    namespace: str
    name: str
    status: Mapping[str, Any]
    why: str = ""  # what moved (``status.status_write``'s reason)


@dataclass(frozen=True)
class PostEvent:
    """Post one core/v1 Event: ``type`` is Normal or Warning."""

    involved: ObjectRef
    type: str
    reason: str
    message: str
    time: datetime


Action = Apply | Delete | PatchPodLimit | PatchStatus | PostEvent


def describe(action: Action) -> str:
    """One short line per action, for logs and test tables."""
    match action:
        case Apply():
            return f"apply {action.kind}/{action.name}"
        case Delete():
            return f"delete {action.kind}/{action.name}"
        case PatchPodLimit():
            return f"patch Pod/{action.pod} limit={action.limit}"
        case PatchStatus():
            return f"status {action.kind}/{action.name}"
        case PostEvent():
            return f"event {action.type} {action.reason}"
