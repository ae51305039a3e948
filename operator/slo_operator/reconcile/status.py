"""Status of an InferenceService computed from observations (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from slo_operator.api import conditions as C
from slo_operator.api.conditions import Cond


@dataclass(frozen=True)
class DeploymentObs:
    replicas: int = 0
    ready_replicas: int = 0
    updated_replicas: int = 0
    generation: int = 0
    observed_generation: int = 0


@dataclass(frozen=True)
class PodObs:
    name: str
    phase: str
    unschedulable: bool = False
    message: str = ""
    # The pod's live in-flight limit annotation as an int; None when absent or not a number.
    inflight_limit: int | None = None


def rollout_conditions(
    desired: int,
    dep: DeploymentObs | None,
    pods: Sequence[PodObs],
    gpu_resource: str,
) -> list[Cond]:
    """Ready and Progressing for a service whose objects were applied."""
    stuck = [p for p in pods if p.unschedulable]
    if desired == 0:
        return [
            Cond(C.READY, True, C.SCALED_TO_ZERO, "Scaled to zero replicas"),
            Cond(C.PROGRESSING, False, C.RECONCILED, "Nothing to roll out"),
        ]
    ready = dep.ready_replicas if dep else 0
    if stuck:
        short_gpu = any(f"Insufficient {gpu_resource}" in p.message for p in stuck)
        reason = C.INSUFFICIENT_GPUS if short_gpu else C.PODS_PENDING
        first = stuck[0]
        msg = (
            f"{len(stuck)} of {desired} replicas cannot be scheduled"
            + (f" (not enough {gpu_resource})" if short_gpu else "")
            + f"; pod {first.name}: {first.message}"
        )
        return [
            Cond(C.READY, ready >= desired, reason, f"{ready}/{desired} replicas ready; {msg}"),
            Cond(C.PROGRESSING, False, reason, msg),
        ]
    rolling = dep is None or dep.observed_generation < dep.generation or (
        dep.updated_replicas < desired
    )
    if ready >= desired and not rolling:
        return [
            Cond(C.READY, True, C.AVAILABLE, f"{ready}/{desired} replicas ready"),
            Cond(C.PROGRESSING, False, C.RECONCILED, "Rollout complete"),
        ]
    return [
        Cond(C.READY, ready >= desired, C.NOT_READY if ready < desired else C.AVAILABLE,
             f"{ready}/{desired} replicas ready"),
        Cond(C.PROGRESSING, True, C.ROLLING_OUT, f"Rolling out: {ready}/{desired} replicas ready"),
    ]
