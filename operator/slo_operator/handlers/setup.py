"""Operator-wide kopf settings and the shared context handlers read from memo."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf

from slo_operator.adapters.kube import Kube, load_api_client
from slo_operator.api.models import GROUP
from slo_operator.engine.profiles import load_profiles
from slo_operator.reconcile.service import Settings


@dataclass
class Context:
    kube: Kube
    settings: Settings
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        # Timers, watch events and change handlers may fire together for one object.
        return self.locks.setdefault((namespace, name), asyncio.Lock())


def context(memo: Any) -> Context:
    ctx: Context = memo.slo
    return ctx


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Kopf's bookkeeping lives in status, not annotations, so the objects users keep
    # in Git are never touched by the operator (no drift in Argo CD).
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf")
    settings.persistence.diffbase_storage = kopf.StatusDiffBaseStorage(name="kopf")
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # The resources are known up front; scanning CRDs would need cluster-wide read access
    # to CustomResourceDefinitions, which the least-privilege role does not grant.
    settings.scanning.disabled = True
    settings.execution.max_workers = int(os.environ.get("SLO_WORKERS", "8"))
    api = load_api_client(os.environ.get("SLO_KUBECONFIG") or None)
    extra = os.environ.get("SLO_PROFILES_DIR")
    profiles = load_profiles() + (load_profiles(Path(extra)) if extra else ())
    logging.getLogger(__name__).info(
        "Loaded %d node profiles: %s", len(profiles), ", ".join(p.source for p in profiles)
    )
    memo.slo = Context(
        kube=Kube(api),
        settings=Settings(
            runtime_image=os.environ.get("SLO_RUNTIME_IMAGE", Settings().runtime_image),
            profiles=profiles,
        ),
    )
