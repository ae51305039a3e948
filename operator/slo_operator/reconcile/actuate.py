"""Actuation of the live batch limit: running pods' annotation, never the pod template.

The gateway in each pod reads the annotation through a downward-API file, so a change
takes effect without a restart; the Deployment's template (and so its generation and
every pod's UID) stays as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from slo_operator.api.cluster import PodObs
from slo_operator.reconcile.actions import PatchPodLimit


def pods_off_limit(pods: Sequence[PodObs], limit: int) -> list[str]:
    """Names of live pods whose annotation differs from ``limit`` (pure)."""
    return sorted(p.name for p in pods if p.phase not in ("Succeeded", "Failed")
                  and p.inflight_limit != limit)


def live_limit_patches(namespace: str, pods: Sequence[PodObs], limit: int
                       ) -> list[PatchPodLimit]:
    """One annotation patch per pod that differs from ``limit`` (pure)."""
    return [PatchPodLimit(namespace, name, limit) for name in pods_off_limit(pods, limit)]
