"""The cluster's own objects as the operator sees them (api.cluster)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import FrozenInstanceError, fields
from typing import Any, get_type_hints

import pytest

from slo_operator.api.cluster import (
    ApiRejected,
    DeploymentObs,
    NodeInfo,
    ObjKey,
    PodObs,
    Snapshot,
)


def test_a_node_is_schedulable_with_nothing_allocatable_by_default() -> None:
    node = NodeInfo("n1", {"a": "b"})
    assert node.schedulable is True
    assert node.allocatable == {}


def test_deployment_defaults() -> None:
    d = DeploymentObs()
    assert [getattr(d, f.name) for f in fields(d)] == [0, 0, 0, 0, 0, None, "", ""]


def test_pod_defaults() -> None:
    p = PodObs("p", "Running")
    assert (p.unschedulable, p.message, p.inflight_limit, p.ready, p.ready_since) == (
        False, "", None, False, None)
    assert (p.variant, p.gpu_product, p.gpus, p.gpu_resource, p.node) == ("", "", 0, "", "")


def test_total_of_nothing_is_none_and_of_one_is_that_one() -> None:
    assert DeploymentObs.total([]) is None
    one = DeploymentObs(replicas=3, generation=2, observed_generation=1, spec_replicas=None,
                        name="a", variant="h100")
    assert DeploymentObs.total([one]) is one
    assert one.total([]) is None  # a static method: the instance plays no part


def test_total_sums_counts_and_replicas_asked() -> None:
    a = DeploymentObs(2, 1, 2, 5, 5, spec_replicas=2, name="a", variant="x")
    b = DeploymentObs(3, 2, 1, 7, 7, spec_replicas=0, name="b", variant="y")
    assert DeploymentObs.total([a, b]) == DeploymentObs(
        replicas=5, ready_replicas=3, updated_replicas=3, generation=5, observed_generation=5,
        spec_replicas=2)


@pytest.mark.parametrize(("specs", "want"), [
    ((None, 2), None), ((2, None), None), ((0, 0), 0), ((1, 4), 5), ((0, 3), 3)])
def test_total_replicas_asked_is_unknown_when_any_is(specs: tuple[int | None, int | None],
                                                     want: int | None) -> None:
    deps = [DeploymentObs(spec_replicas=s) for s in specs]
    total = DeploymentObs.total(deps)
    assert total is not None and total.spec_replicas == want


def test_total_takes_generations_of_the_first_lagging_rollout() -> None:
    done = DeploymentObs(generation=3, observed_generation=3)
    lag1 = DeploymentObs(generation=5, observed_generation=4)
    lag2 = DeploymentObs(generation=9, observed_generation=1)
    total = DeploymentObs.total([done, lag1, lag2])
    assert total is not None
    assert (total.generation, total.observed_generation) == (5, 4)


def test_total_takes_generations_of_the_first_when_none_lags() -> None:
    first = DeploymentObs(generation=3, observed_generation=3)
    second = DeploymentObs(generation=8, observed_generation=8)
    ahead = DeploymentObs(generation=2, observed_generation=6)
    total = DeploymentObs.total([first, second, ahead])
    assert total is not None
    assert (total.generation, total.observed_generation) == (3, 3)


def test_snapshot_defaults_are_empty() -> None:
    s = Snapshot()
    assert (s.services, s.policies, s.deployments, s.pods, s.variant_deployments) == (
        {}, {}, {}, {}, {})
    assert s.nodes == ()
    assert s.prices is None
    assert s.memo == {}
    assert s.policy("ns", "p") is None
    assert s.deployment("ns", "svc") is None
    assert s.variants("ns", "svc") == {}
    assert s.pods_of("ns", "svc") == ()


def test_snapshot_lookups_by_namespace_and_name() -> None:
    dep = DeploymentObs(replicas=1)
    pod = PodObs("p", "Running")
    s = Snapshot(policies={("ns", "gold"): {"spec": {}}},
                 deployments={("ns", "chat"): dep},
                 pods={("ns", "chat"): [pod]},
                 variant_deployments={("ns", "chat"): {"h100": dep}})
    assert s.policy("ns", "gold") == {"spec": {}}
    assert s.policy("gold", "ns") is None
    assert s.deployment("ns", "chat") is dep
    assert s.pods_of("ns", "chat") == [pod]
    assert s.variants("ns", "chat") == {"h100": dep}
    assert s.variants("other", "chat") == {}


def test_memo_is_left_out_of_comparison_and_repr() -> None:
    a, b = Snapshot(), Snapshot()
    a.memo["pools"] = 1
    assert a == b
    assert "memo" not in repr(a)
    assert b.memo == {}


def test_api_rejection_keeps_the_servers_message() -> None:
    err = ApiRejected("Deployment", "chat", 422, "spec.replicas: must be >= 0")
    assert str(err) == "Deployment chat: spec.replicas: must be >= 0"
    assert (err.kind, err.name, err.status, err.message) == (
        "Deployment", "chat", 422, "spec.replicas: must be >= 0")


@pytest.mark.parametrize("value", [
    NodeInfo("n", {}), DeploymentObs(), PodObs("p", "Running"), Snapshot()])
def test_observed_objects_are_immutable(value: object) -> None:
    with pytest.raises(FrozenInstanceError):
        value.name = "other"  # type: ignore[attr-defined]


def test_declared_types_resolve() -> None:
    """typing.get_type_hints reads the same types the adapters and tests build."""
    assert ObjKey == tuple[str, str]
    assert get_type_hints(DeploymentObs)["spec_replicas"] == int | None
    pod = get_type_hints(PodObs)
    assert (pod["inflight_limit"], pod["ready_since"]) == (int | None, float | None)
    assert get_type_hints(Snapshot)["prices"] == Mapping[str, Mapping[str, str]] | None
    assert get_type_hints(DeploymentObs.total)["return"] == DeploymentObs | None
    assert get_type_hints(Snapshot.policy)["return"] == Mapping[str, Any] | None
    assert get_type_hints(Snapshot.deployment)["return"] == DeploymentObs | None
