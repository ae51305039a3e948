"""What the operator observes of the cluster's own objects, as plain immutable values.

These sit low (in ``api``) so the Kubernetes adapter produces them, ``reconcile`` and
``control`` read them, and tests build them, without any package importing upward.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class NodeInfo:
    """What the planner needs from one Node object."""

    name: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, str] = field(default_factory=dict)
    schedulable: bool = True


@dataclass(frozen=True)
class DeploymentObs:
    """The owned vLLM Deployment as last seen."""

    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    generation: int = 0
    observed_generation: int = 0
    spec_replicas: int | None = None


@dataclass(frozen=True)
class PodObs:
    """One owned pod as last seen."""

    name: str
    phase: str
    unschedulable: bool = False
    message: str = ""
    # The pod's live in-flight limit annotation as an int; None when absent or not a number.
    inflight_limit: int | None = None
    ready: bool = False
    ready_since: float | None = None  # seconds since the epoch of the Ready transition


ObjKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class Snapshot:
    """One consistent read of everything a pass needs, from watch caches (or LISTs).

    ``services`` and ``policies`` hold the custom resources' wire bodies by (namespace,
    name); ``deployments`` and ``pods`` are keyed by (namespace, owning service name).
    """

    services: Mapping[ObjKey, Mapping[str, Any]] = field(default_factory=dict)
    policies: Mapping[ObjKey, Mapping[str, Any]] = field(default_factory=dict)
    deployments: Mapping[ObjKey, DeploymentObs] = field(default_factory=dict)
    pods: Mapping[ObjKey, Sequence[PodObs]] = field(default_factory=dict)
    nodes: Sequence[NodeInfo] = ()
    # Values derived once per snapshot (e.g. GPU pools from the nodes) by their users.
    memo: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def policy(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The SLOPolicy body, or None when it does not exist."""
        return self.policies.get((namespace, name))

    def deployment(self, namespace: str, service: str) -> DeploymentObs | None:
        """The service's Deployment, or None before it exists."""
        return self.deployments.get((namespace, service))

    def pods_of(self, namespace: str, service: str) -> Sequence[PodObs]:
        """The service's live pods."""
        return self.pods.get((namespace, service), ())


class ApiRejected(Exception):
    """The API server refused a write (4xx/5xx); ``message`` is its own, naming the field."""

    def __init__(self, kind: str, name: str, status: int, message: str) -> None:
        super().__init__(f"{kind} {name}: {message}")
        self.kind = kind
        self.name = name
        self.status = status
        self.message = message
