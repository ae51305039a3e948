"""Actuation of the live batch limit: running pods' annotation, never the pod template.

The gateway in each pod reads the annotation through a downward-API file, so a change
takes effect without a restart; the Deployment's template (and so its generation and
every pod's UID) stays as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from slo_operator.reconcile.status import PodObs
from slo_operator.render.objects import live_limit_patch


class PodPatcher(Protocol):
    def patch_pod(self, namespace: str, name: str, patch: dict[str, object]) -> None: ...


def pods_off_limit(pods: Sequence[PodObs], limit: int) -> list[str]:
    """Names of live pods whose annotation differs from ``limit`` (pure)."""
    return sorted(p.name for p in pods if p.phase not in ("Succeeded", "Failed")
                  and p.inflight_limit != limit)


def apply_live_limit(
    kube: PodPatcher, namespace: str, pods: Sequence[PodObs], limit: int
) -> list[str]:
    """Patch the live-limit annotation on the pods that differ; returns their names."""
    names = pods_off_limit(pods, limit)
    for name in names:
        kube.patch_pod(namespace, name, live_limit_patch(limit))
    return names
