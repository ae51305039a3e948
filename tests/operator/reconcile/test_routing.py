"""The InferencePool's reconcile: opt-in, only where the CRD is served, deleted when off."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from slo_operator.api.errors import field_problems, summarize
from slo_operator.api.models import Condition, InferencePoolRouting, InferenceServiceSpec
from slo_operator.reconcile.actions import Apply, Delete, PostEvent
from slo_operator.reconcile.planner import Settings, plan_reconcile
from slo_operator.reconcile.routing import (
    APPLIED,
    CRD_MISSING,
    DISABLED,
    INFERENCE_POOL_READY,
    plan_pool,
)
from slo_operator.render.objects import RenderInput
from tests.operator.reconcile.test_planner import SETTLED, applied_after
from tests.operator.reconcile.test_service import NOW, NS, make_isvc

RENDER = RenderInput(name="chat", namespace=NS, uid="uid-1", engine_image="vllm:x",
                     runtime_image="rt:x", engine_args=())
ON = InferencePoolRouting.model_validate({"enabled": True,
                                          "endpointPickerRef": {"name": "epp"}})
OFF = InferencePoolRouting()
POOL_SPEC = {"inferencePool": {"enabled": True, "endpointPickerRef": {"name": "epp"}}}


def cond(status: str, reason: str) -> Condition:
    return Condition(type=INFERENCE_POOL_READY, status=status, reason=reason)


@dataclass
class Served:
    """API discovery as a value: the kinds served, and what was asked."""

    kinds: set[tuple[str, str]] = field(default_factory=set)
    asked: list[tuple[str, str]] = field(default_factory=list)

    def serves(self, api_version: str, kind: str) -> bool:
        self.asked.append((api_version, kind))
        return (api_version, kind) in self.kinds


POOL_API = ("inference.networking.k8s.io/v1", "InferencePool")


@pytest.mark.parametrize(
    ("routing", "served", "before", "want_apply", "want_force", "want_delete", "want_reason"),
    [
        (ON, True, None, True, True, False, APPLIED),
        (ON, True, cond("True", APPLIED), True, False, False, APPLIED),
        (ON, True, cond("False", CRD_MISSING), True, True, False, APPLIED),
        (ON, False, None, False, False, False, CRD_MISSING),
        (OFF, True, cond("True", APPLIED), False, False, True, DISABLED),
        (OFF, True, cond("False", CRD_MISSING), False, False, False, DISABLED),
        (OFF, True, None, False, False, False, None),
    ],
)
def test_plan_pool(routing: InferencePoolRouting, served: bool, before: Condition | None,
                   want_apply: bool, want_force: bool, want_delete: bool,
                   want_reason: str | None) -> None:
    plan = plan_pool(routing, RENDER, served, [before] if before else [])
    assert (plan.obj is not None) == want_apply
    assert plan.force == want_force
    assert plan.deletes == ([Delete("InferencePool", NS, "chat")] if want_delete else [])
    assert (plan.cond.reason if plan.cond else None) == want_reason


def test_crd_missing_condition_names_the_crd() -> None:
    plan = plan_pool(ON, RENDER, False, [])
    assert plan.cond is not None and plan.cond.status is False
    assert "inferencepools.inference.networking.k8s.io" in plan.cond.message
    assert "spec.routing.inferencePool.enabled" in plan.cond.message


def _pools(actions: Any) -> list[Apply]:
    return [a for a in actions if isinstance(a, Apply) and a.kind == "InferencePool"]


def _conds(status: Any) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


def test_reconcile_applies_the_pool_once_and_reports_it() -> None:
    served = Served({POOL_API})
    settings = Settings(discovery=served)
    first = plan_reconcile(make_isvc(routing=POOL_SPEC), SETTLED, NOW, settings)
    assert len(_pools(first.actions)) == 1
    assert _conds(first.status)[INFERENCE_POOL_READY]["status"] == "True"
    # Written and applied: the next pass sends nothing for the pool.
    again = plan_reconcile(make_isvc(routing=POOL_SPEC, status=dict(first.status)), SETTLED,
                           NOW, settings, applied_after(first))
    assert _pools(again.actions) == []
    assert served.asked == [POOL_API, POOL_API]


def test_reconcile_without_the_crd_reports_it_and_applies_everything_else() -> None:
    plan = plan_reconcile(make_isvc(routing=POOL_SPEC), SETTLED, NOW,
                          Settings(discovery=Served()))
    assert _pools(plan.actions) == []
    assert {a.kind for a in plan.actions if isinstance(a, Apply)} >= {"Deployment", "Service"}
    c = _conds(plan.status)[INFERENCE_POOL_READY]
    assert (c["status"], c["reason"]) == ("False", CRD_MISSING)
    assert _conds(plan.status)["Ready"]["reason"] != CRD_MISSING
    # Said once, as a Warning Event, on the transition.
    warned = [a for a in plan.actions if isinstance(a, PostEvent) and a.reason == CRD_MISSING]
    assert [a.type for a in warned] == ["Warning"]


def test_reconcile_deletes_the_pool_when_turned_off() -> None:
    settings = Settings(discovery=Served({POOL_API}))
    first = plan_reconcile(make_isvc(routing=POOL_SPEC), SETTLED, NOW, settings)
    off = plan_reconcile(make_isvc(status=dict(first.status)), SETTLED, NOW, settings,
                         applied_after(first))
    assert Delete("InferencePool", NS, "chat") in off.actions
    assert _conds(off.status)[INFERENCE_POOL_READY]["reason"] == DISABLED
    later = plan_reconcile(make_isvc(status=dict(off.status)), SETTLED, NOW, settings,
                           applied_after(first))
    assert not [a for a in later.actions if isinstance(a, Delete)]


def test_services_without_routing_never_ask_discovery() -> None:
    served = Served({POOL_API})
    plan = plan_reconcile(make_isvc(), SETTLED, NOW, Settings(discovery=served))
    assert served.asked == [] and _pools(plan.actions) == []
    assert INFERENCE_POOL_READY not in _conds(plan.status)


@pytest.mark.parametrize(
    ("pool", "field_name"),
    [
        ({"enabled": True}, "spec.routing.inferencePool.endpointPickerRef"),
        ({"enabled": True, "endpointPickerRef": {"name": "epp", "port": 0}},
         "spec.routing.inferencePool.endpointPickerRef.port"),
        ({"enabled": True, "endpointPickerRef": {"name": "Bad_Name"}},
         "spec.routing.inferencePool.endpointPickerRef.name"),
        ({"enabled": True, "endpointPickerRef": {"name": "epp", "failureMode": "Maybe"}},
         "spec.routing.inferencePool.endpointPickerRef.failureMode"),
    ],
)
def test_bad_routing_values_name_the_field(pool: dict[str, Any], field_name: str) -> None:
    with pytest.raises(ValidationError) as err:
        InferenceServiceSpec.model_validate(
            {"model": {"name": "org/m", "sizeBillions": 8}, "routing": {"inferencePool": pool}})
    assert field_name in summarize(field_problems(err.value))
