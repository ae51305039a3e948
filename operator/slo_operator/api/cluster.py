"""What the operator observes of the cluster's own objects, as plain immutable values.

These sit low (in ``api``) so the Kubernetes adapter produces them, ``reconcile`` and
``control`` read them, and tests build them, without any package importing upward.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slo_operator.api.activation import ActivatorEndpoints


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
    name: str = ""
    variant: str = ""  # the GPU pool's variant id; "" for a Deployment without one

    @staticmethod
    def total(deployments: Sequence[DeploymentObs]) -> DeploymentObs | None:
        """One service-wide view of its variants' Deployments (counts summed; generations
        of the first whose rollout lags, else of the first)."""
        if not deployments:
            return None
        if len(deployments) == 1:
            return deployments[0]
        lag = [d for d in deployments if d.observed_generation < d.generation]
        ref = (lag or list(deployments))[0]
        specs = [d.spec_replicas for d in deployments]
        return DeploymentObs(
            replicas=sum(d.replicas for d in deployments),
            ready_replicas=sum(d.ready_replicas for d in deployments),
            updated_replicas=sum(d.updated_replicas for d in deployments),
            generation=ref.generation, observed_generation=ref.observed_generation,
            spec_replicas=None if any(r is None for r in specs)
            else sum(r or 0 for r in specs),
        )


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
    variant: str = ""  # the variant (GPU pool) whose Deployment owns the pod
    gpu_product: str = ""  # the pod's GPU product label value
    gpus: int = 0  # GPUs (or slices) the pod requests
    gpu_resource: str = ""  # the extended resource it requests them as
    node: str = ""  # the node it is bound to ("" while unscheduled)


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
    # Each service's Deployments by variant id (one per GPU pool it runs on).
    variant_deployments: Mapping[ObjKey, Mapping[str, DeploymentObs]] = field(
        default_factory=dict)
    # The cluster's GPU price list (ConfigMap data by ConfigMap name), None: defaults.
    prices: Mapping[str, Mapping[str, str]] | None = None
    # Tenant wire bodies by name (cluster-scoped) and namespace labels by name
    # (reconcile.tenancy).
    tenants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # Scale to zero: the activator's Ready endpoints by its Service (namespace, name), and
    # the operator's route slices (the EndpointSlice sending a service to the activator)
    # by (namespace, InferenceService name).
    activators: Mapping[ObjKey, ActivatorEndpoints] = field(default_factory=dict)
    routes: Mapping[ObjKey, str] = field(default_factory=dict)

    def policy(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """The SLOPolicy body, or None when it does not exist."""
        return self.policies.get((namespace, name))

    def deployment(self, namespace: str, service: str) -> DeploymentObs | None:
        """The service's Deployment, or None before it exists."""
        return self.deployments.get((namespace, service))

    def variants(self, namespace: str, service: str) -> Mapping[str, DeploymentObs]:
        """The service's Deployments by variant id (empty before any exists)."""
        return self.variant_deployments.get((namespace, service), {})

    def pods_of(self, namespace: str, service: str) -> Sequence[PodObs]:
        """The service's live pods."""
        return self.pods.get((namespace, service), ())


def transient_status(status: int) -> bool:
    """An HTTP status worth retrying soon rather than reporting: 409 (a conflict: the
    object changed meanwhile), 429 (throttled), any 5xx, or 0 (no answer)."""
    return status in (0, 409, 429) or status >= 500


class ApiRejected(Exception):
    """The API server refused a write (4xx/5xx); ``message`` is its own, naming the field."""

    def __init__(self, kind: str, name: str, status: int, message: str) -> None:
        super().__init__(f"{kind} {name}: {message}")
        self.kind = kind
        self.name = name
        self.status = status
        self.message = message

    @property
    def transient(self) -> bool:
        """A refusal of the moment (see :func:`transient_status`), not of the object."""
        return transient_status(self.status)
