"""The demo's tenants: valid manifests, different GPUs and objectives, traces as asked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from slo_devtools.demo import scenario
from slo_devtools.sim.traces import read_azure
from slo_operator.api.models import InferenceServiceSpec, SLOPolicySpec


def docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_each_tenant_manifest_holds_a_valid_policy_and_service_in_its_namespace() -> None:
    for tenant, path in zip(scenario.TENANTS, scenario.manifests(scenario.TENANTS), strict=True):
        by_kind = {d["kind"]: d for d in docs(path)}
        ns, name = tenant.service.split("/")
        assert by_kind["Namespace"]["metadata"]["name"] == ns
        svc = by_kind["InferenceService"]
        assert (svc["metadata"]["namespace"], svc["metadata"]["name"]) == (ns, name)
        spec = InferenceServiceSpec.model_validate(svc["spec"])
        assert spec.slo_policy_ref is not None
        assert spec.slo_policy_ref.name == by_kind["SLOPolicy"]["metadata"]["name"]
        SLOPolicySpec.model_validate(by_kind["SLOPolicy"]["spec"])


def test_tenants_differ_in_gpu_precision_objectives_and_trace() -> None:
    specs = []
    for path in scenario.manifests(scenario.TENANTS):
        by_kind = {d["kind"]: d for d in docs(path)}
        specs.append((InferenceServiceSpec.model_validate(by_kind["InferenceService"]["spec"]),
                      SLOPolicySpec.model_validate(by_kind["SLOPolicy"]["spec"])))
    (svc_a, pol_a), (svc_b, pol_b) = specs
    assert svc_a.hardware.gpu_products != svc_b.hardware.gpu_products
    assert svc_a.engine.precision != svc_b.engine.precision
    assert pol_a.objectives != pol_b.objectives
    assert len({t.trace for t in scenario.TENANTS}) == 2


def test_trace_option_replays_one_trace_for_all() -> None:
    assert {t.trace for t in scenario.tenants("azure-code")} == {"azure-code"}
    assert scenario.tenants(None) == scenario.TENANTS


def test_unknown_trace_names_the_option_and_the_choices() -> None:
    with pytest.raises(scenario.ScenarioError, match=r"--trace: .*azure-code, azure-conv"):
        scenario.tenants("nope")


@pytest.mark.parametrize(("speed", "duration", "field"),
                         [(0.0, None, "--speed"), (10.0, -1.0, "--duration")])
def test_bad_speed_or_duration_names_the_flag(speed: float, duration: float | None,
                                              field: str) -> None:
    with pytest.raises(scenario.ScenarioError, match=field):
        scenario.load(scenario.TENANTS[0], speed, duration)


def test_load_compresses_time_and_cuts_to_the_duration() -> None:
    tenant = scenario.TENANTS[1]
    full = scenario.load(tenant, 30.0, None)
    assert full.duration == pytest.approx(scenario.trace_span(tenant.trace) / 30.0)
    cut = scenario.load(tenant, 30.0, 20.0)
    assert cut.duration == 20.0
    assert cut.requests and all(r.t < 20.0 for r in cut.requests)
    assert cut.requests == tuple(r for r in full.requests if r.t < 20.0)
    assert all(r.tenant == tenant.service for r in cut.requests)


@pytest.mark.parametrize("speed", [5.0, 20.0, 60.0])
def test_load_level_follows_the_tenant_rate_factor_whatever_the_speed(speed: float) -> None:
    tenant = scenario.TENANTS[0]
    source_rate = len(read_azure(tenant.trace)) / scenario.trace_span(tenant.trace)
    tr = scenario.load(tenant, speed, None)
    assert tr.rate_factor == pytest.approx(tenant.rate_factor)
    # Requests per replay second (thinning keeps each request at random, seeded: at x60
    # about 320 requests are kept, so a few percent either way).
    assert len(tr.requests) / tr.duration == pytest.approx(tenant.rate_factor * source_rate,
                                                           rel=0.1)
