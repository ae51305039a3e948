"""Plan a service's InferencePool: apply, delete or report why not (pure).

The pool is opt-in (``spec.routing.inferencePool.enabled``) and needs the Gateway API
Inference Extension's CRD; whether the API server serves it arrives as a value. What was
done before is read from the service's own ``InferencePoolReady`` condition, so nothing
else has to be remembered:

- enabled, CRD served: apply the pool (even when the applied cache holds it, unless the
  condition already says it was applied: it may have been deleted meanwhile); True,
  ``Applied``;
- enabled, CRD not served: nothing applied; False, ``CRDMissing``, naming the CRD;
- disabled after a pool was applied (condition True): delete it; False, ``Disabled``;
- disabled otherwise: no write, and a condition only where one was set before.

Deleting the InferenceService deletes its pool through the owner reference.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slo_operator.api import conditions as C
from slo_operator.api.conditions import Cond
from slo_operator.api.models import Condition, InferencePoolRouting
from slo_operator.reconcile.actions import Delete
from slo_operator.render.inference_pool import (
    INFERENCE_POOL_API_VERSION,
    INFERENCE_POOL_CRD,
    INFERENCE_POOL_KIND,
    build_inference_pool,
    inference_pool_name,
)
from slo_operator.render.objects import RenderInput
from slo_runtime.contract import GATEWAY_PORT

# Condition type and reasons (api.conditions; docs/gateway.md lists them for users).
INFERENCE_POOL_READY = C.INFERENCE_POOL_READY
APPLIED = C.POOL_APPLIED
CRD_MISSING = C.CRD_MISSING
DISABLED = C.POOL_DISABLED


@dataclass(frozen=True)
class PoolPlan:
    """The pool's writes and condition for one reconcile."""

    obj: dict[str, Any] | None = None  # to apply
    force: bool = False  # apply even when the applied cache holds this very object
    delete: Delete | None = None
    cond: Cond | None = None

    @property
    def objects(self) -> list[dict[str, Any]]:
        return [self.obj] if self.obj is not None else []

    @property
    def deletes(self) -> list[Delete]:
        return [self.delete] if self.delete is not None else []


def _previous(conditions: Sequence[Condition]) -> Condition | None:
    return next((c for c in conditions if c.type == INFERENCE_POOL_READY), None)


def plan_pool(routing: InferencePoolRouting, render: RenderInput, served: bool,
              conditions: Sequence[Condition]) -> PoolPlan:
    """The pool's plan from the spec's ``routing``, the service's primary ``render``
    input (name, namespace, owner, labels), whether the API server ``served`` the
    InferencePool kind and the service's current ``conditions``."""
    prev = _previous(conditions)
    name = inference_pool_name(render.name)
    if not routing.enabled:
        if prev is None:
            return PoolPlan()
        message = "spec.routing.inferencePool.enabled is false: no InferencePool"
        if prev.status == "True":
            return PoolPlan(delete=Delete(INFERENCE_POOL_KIND, render.namespace, name),
                            cond=Cond(INFERENCE_POOL_READY, False, DISABLED,
                                      f"{message} (InferencePool {name} deleted)"))
        return PoolPlan(cond=Cond(INFERENCE_POOL_READY, False, DISABLED, message))
    if not served:
        return PoolPlan(cond=Cond(
            INFERENCE_POOL_READY, False, CRD_MISSING,
            f"spec.routing.inferencePool.enabled is true but the API server does not serve "
            f"{INFERENCE_POOL_API_VERSION} {INFERENCE_POOL_KIND}: install the CRD "
            f"{INFERENCE_POOL_CRD} (Gateway API Inference Extension)"))
    picker = routing.endpoint_picker_ref
    assert picker is not None  # the API model requires it when enabled
    return PoolPlan(
        obj=build_inference_pool(render, routing),
        force=prev is None or prev.status != "True",
        cond=Cond(INFERENCE_POOL_READY, True, APPLIED,
                  f"InferencePool {name} selects the pods of every GPU variant on port "
                  f"{GATEWAY_PORT}; endpoint picker {picker.kind} {picker.name}:{picker.port}"),
    )
