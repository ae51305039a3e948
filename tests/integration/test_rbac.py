"""Every rule of the chart's ClusterRole is needed: removing any one breaks a reconcile.

Each case binds the role minus one rule to a fresh ServiceAccount and runs one full
reconcile of a service (and its policy) with that identity against the real API server.
The full role must do everything; each reduced role must fail somewhere a user would see.
"""

from __future__ import annotations

import copy
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.adapters.kube import Kube, load_api_client
from slo_operator.api.models import GROUP
from slo_operator.reconcile.policy_binding import reconcile_policy_sync
from slo_operator.reconcile.service import Settings, reconcile_service_sync
from slo_operator.render.objects import ANNOTATION_INFLIGHT_LIMIT
from tests.integration.operator_support import (
    bind_role,
    chart_cluster_role,
    conditions,
    events_for,
    install_crds,
)

pytestmark = pytest.mark.integration


def _role_cases() -> list[Any]:
    # Read the chart's template statically for the ids; the test renders it with helm.
    import yaml

    from tests.integration.operator_support import CHART

    text = (CHART / "templates" / "clusterrole.yaml").read_text()
    body = "\n".join(line for line in text.splitlines() if "{{" not in line)
    rules = yaml.safe_load(body)["rules"]
    cases: list[Any] = [pytest.param(None, id="full-role")]
    for i, r in enumerate(rules):
        cases.append(pytest.param(
            i, id="without-" + "+".join(r["resources"]) + "-" + "+".join(r["verbs"])))
    return cases


def _reconcile_once(cluster: LocalCluster, kubeconfig: Any, ns: str) -> list[str]:
    """Run the reconciler as the given identity; return what went wrong (empty: all good)."""
    problems: list[str] = []
    kube = Kube(load_api_client(str(kubeconfig)))
    now = datetime.now(UTC)
    admin = cluster.kubectl_json
    try:
        # The operator's watch caches hold what these LISTs return.
        snap = kube.read_snapshot()
        reconcile_policy_sync(kube, snap.policies[(ns, "gold")], now, snap.services.values())
        reconcile_service_sync(kube, snap.services[(ns, "chat")], snap, now, Settings())
        if admin("get", "deploy", "-n", ns)["items"]:
            # Once pods exist, a reconcile sets their live limit (a pod patch).
            cluster.wait_for(lambda: admin("get", "pods", "-n", ns)["items"], timeout=60,
                             desc="pods created")
            snap = kube.read_snapshot()
            reconcile_service_sync(kube, snap.services[(ns, "chat")], snap,
                                   datetime.now(UTC), Settings())
    except ApiException as e:
        problems.append(f"API error {e.status} {e.reason}")
    for pod in admin("get", "pods", "-n", ns)["items"]:
        if ANNOTATION_INFLIGHT_LIMIT not in (pod["metadata"].get("annotations") or {}):
            problems.append(f"pod {pod['metadata']['name']} has no live limit")
    if not admin("get", "pods", "-n", ns)["items"]:
        problems.append("no pods")
    svc = admin("get", "infsvc", "-n", ns, "chat")
    conds = conditions(svc)
    if conds.get("HardwareResolved", {}).get("status") != "True":
        problems.append(f"no HardwareResolved=True: {conds.get('HardwareResolved')}")
    if (svc.get("status") or {}).get("replicas") is None:
        problems.append("deployment status not observed")
    if "Ready" not in conds:
        problems.append("no Ready condition")
    objs = cluster.kubectl("get", "deploy,svc,pdb", "-n", ns, "-o", "name").stdout.split()
    if len(objs) < 3:
        problems.append(f"owned objects missing: {objs}")
    if not events_for(cluster, ns, "chat"):
        problems.append("no Events posted")
    if not (admin("get", "slo", "-n", ns, "gold").get("status") or {}).get("boundServices"):
        problems.append("policy status not written")
    return problems


@pytest.mark.parametrize("drop", _role_cases())
def test_each_rule_is_needed(cluster: LocalCluster, namespace: str, drop: int | None) -> None:
    install_crds(cluster)
    role = chart_cluster_role(cluster)
    if drop is not None:
        role = copy.deepcopy(role)
        del role["rules"][drop]
    sa = f"op-{uuid.uuid4().hex[:6]}"
    kubeconfig = bind_role(cluster, role, namespace, sa)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=f"""
apiVersion: {GROUP}/v1alpha1
kind: SLOPolicy
metadata: {{name: gold}}
spec: {{scaling: {{minReplicas: 1, maxReplicas: 2}}}}
---
apiVersion: {GROUP}/v1alpha1
kind: InferenceService
metadata: {{name: chat}}
spec:
  model: {{name: org/chat, sizeBillions: 8}}
  hardware: {{gpuProducts: [H100]}}
  sloPolicyRef: {{name: gold}}
""")
    # The authorizer's caches lag a new binding a little: wait until the identity holds
    # the last rule of its role before judging what it can do.
    last = role["rules"][-1]
    group = last["apiGroups"][0]
    resource = last["resources"][0] + (f".{group}" if group else "")
    cluster.wait_for(
        lambda: cluster.kubectl("auth", "can-i", last["verbs"][0], resource, "-n", namespace,
                                kubeconfig=kubeconfig, check=False).stdout.strip() == "yes",
        timeout=30, desc=f"binding effective for {sa}")
    problems = _reconcile_once(cluster, kubeconfig, namespace)
    if drop is None:
        assert problems == []
    else:
        assert problems, f"rule {role} without #{drop} still reconciled fully: rule not needed"


# Requests the operator must never be able to make, whatever the chart's values: Secrets
# (tokens, credentials), exec/attach/port-forward into pods, RBAC itself, impersonation.
NEVER = [
    ("get", "", "secrets", ""), ("list", "", "secrets", ""), ("watch", "", "secrets", ""),
    ("create", "", "pods", "exec"), ("create", "", "pods", "attach"),
    ("create", "", "pods", "portforward"), ("delete", "", "pods", ""),
    ("delete", "", "namespaces", ""), ("create", "", "serviceaccounts", "token"),
    ("escalate", "rbac.authorization.k8s.io", "clusterroles", ""),
    ("bind", "rbac.authorization.k8s.io", "clusterroles", ""),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
    ("impersonate", "", "users", ""), ("delete", "apiextensions.k8s.io",
                                         "customresourcedefinitions", ""),
]
# And some it needs (so the denials above are not an identity that can do nothing).
NEEDED = [
    ("patch", "apps", "deployments", ""), ("patch", "", "pods", ""),
    ("patch", GROUP, "inferenceservices", "status"), ("create", "", "events", ""),
    ("patch", "monitoring.coreos.com", "prometheusrules", ""),
    ("patch", "inference.networking.k8s.io", "inferencepools", ""),
]


def _allowed(cluster: LocalCluster, user: str, namespace: str, verb: str, group: str,
             resource: str, sub: str) -> bool:
    """The API server's own answer (a SubjectAccessReview) for one request of ``user``."""
    attrs = {"namespace": namespace, "verb": verb, "group": group, "resource": resource}
    if sub:
        attrs["subresource"] = sub
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": user, "groups": ["system:serviceaccounts",
                                                  "system:authenticated"],
                       "resourceAttributes": attrs}}
    out = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(review)).stdout
    return bool(json.loads(out)["status"].get("allowed"))


def test_the_role_grants_no_secrets_exec_rbac_or_wildcards(cluster: LocalCluster,
                                                           namespace: str) -> None:
    """The ClusterRole with every opt-in of the chart on (managed alert rules,
    InferencePools), asked of the API server's authorizer for each request."""
    import yaml

    from tests.integration.operator_support import CHART, OPERATOR_NS

    role = yaml.safe_load(cluster.helm(
        "template", "slo-operator", str(CHART), "--namespace", OPERATOR_NS,
        "--set", "alertRules.manage=true", "--set", "inferencePools.enabled=true",
        "--show-only", "templates/clusterrole.yaml").stdout)
    for rule in role["rules"]:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(key, []), rule
        assert not rule.get("nonResourceURLs"), rule
    sa = f"sar-{uuid.uuid4().hex[:6]}"
    bind_role(cluster, role, namespace, sa)
    user = f"system:serviceaccount:{namespace}:{sa}"
    cluster.wait_for(lambda: _allowed(cluster, user, namespace, *NEEDED[0]), timeout=30,
                     desc=f"binding effective for {sa}")
    assert [r for r in NEEDED if not _allowed(cluster, user, namespace, *r)] == []
    assert [r for r in NEVER if _allowed(cluster, user, namespace, *r)] == []


# ------------------------------------------------------------------ scale to zero

ACTIVATOR = "slo-operator-activator"  # the activator's objects for release slo-operator
SLICES = "discovery.k8s.io"


def _bind_checked(cluster: LocalCluster, role: dict[str, Any], sa: str,
                  probe: tuple[str, str, str, str], namespace: str) -> tuple[Path, str]:
    """Bind ``role`` to a new ServiceAccount in the operator's namespace (so every request
    below crosses namespaces); wait until ``probe`` is allowed (the authorizer's cache)."""
    from tests.integration.operator_support import OPERATOR_NS, ensure_namespace

    ensure_namespace(cluster, OPERATOR_NS)
    kubeconfig = bind_role(cluster, role, OPERATOR_NS, sa)
    user = f"system:serviceaccount:{OPERATOR_NS}:{sa}"
    cluster.wait_for(lambda: _allowed(cluster, user, namespace, *probe), timeout=30,
                     desc=f"binding effective for {sa}")
    return kubeconfig, user


def _chart_role(cluster: LocalCluster, template: str, *args: str) -> dict[str, Any]:
    import yaml

    from tests.integration.operator_support import CHART, OPERATOR_NS

    out = cluster.helm("template", "slo-operator", str(CHART), "--namespace", OPERATOR_NS,
                       *args, "--show-only", f"templates/{template}").stdout
    return next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "ClusterRole")


def _inference_service(cluster: LocalCluster, namespace: str, name: str) -> str:
    """Create an InferenceService (as the admin); return its uid."""
    install_crds(cluster)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=f"""
apiVersion: {GROUP}/v1alpha1
kind: InferenceService
metadata: {{name: {name}}}
spec:
  model: {{name: org/chat, sizeBillions: 8}}
  hardware: {{gpuProducts: [H100]}}
""")
    return str(cluster.kubectl_json("get", "infsvc", "-n", namespace, name)["metadata"]["uid"])


def test_operator_role_applies_and_deletes_route_slices_in_service_namespaces(
    cluster: LocalCluster, namespace: str,
) -> None:
    """The chart's operator role (activator on) lets the operator's own server-side apply
    write a service's route EndpointSlice in the service's namespace, and delete it; its
    watch caches list and watch slices cluster-wide. With the activator off, it may still
    watch and delete (a route left from before) but write none."""
    from slo_operator.api.activation import ActivatorEndpoints
    from slo_operator.render.objects import RenderInput, build_activator_route

    uid = _inference_service(cluster, namespace, "chat")
    sa = f"route-{uuid.uuid4().hex[:6]}"
    kubeconfig, user = _bind_checked(cluster, chart_cluster_role(cluster), sa,
                                     ("create", SLICES, "endpointslices", ""), namespace)
    inp = RenderInput(name="chat", namespace=namespace, uid=uid, engine_image="vllm",
                      runtime_image="rt", engine_args=())
    api = load_api_client(str(kubeconfig))
    try:
        kube = Kube(api)
        route = build_activator_route(inp, ActivatorEndpoints(("10.1.0.1", "10.1.0.2")))
        name = route["metadata"]["name"]
        kube.apply(route)  # creates
        kube.apply(build_activator_route(inp, ActivatorEndpoints(("10.1.0.3",))))  # patches
        got = cluster.kubectl_json("get", "endpointslice", "-n", namespace, name)
        assert [e["addresses"] for e in got["endpoints"]] == [["10.1.0.3"]]
        kube.delete("EndpointSlice", namespace, name)  # a replica is Ready again
        gone = cluster.kubectl("get", "endpointslice", "-n", namespace, name, check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr
    finally:
        api.close()  # type: ignore[no-untyped-call]
    for verb in ("list", "watch"):  # cluster-wide: the kopf indexes
        assert _allowed(cluster, user, "", verb, SLICES, "endpointslices", "")

    off = _chart_role(cluster, "clusterrole.yaml", "--set", "activator.enabled=false")
    sa_off = f"route-off-{uuid.uuid4().hex[:6]}"
    _, user_off = _bind_checked(cluster, off, sa_off,
                                ("delete", SLICES, "endpointslices", ""), namespace)
    assert [v for v in ("list", "watch", "delete")
            if not _allowed(cluster, user_off, namespace, v, SLICES, "endpointslices", "")] == []
    assert [v for v in ("create", "patch", "update")
            if _allowed(cluster, user_off, namespace, v, SLICES, "endpointslices", "")] == []


# What the activator must never be able to do: it holds requests and writes one annotation.
ACTIVATOR_NEVER = [
    ("get", "", "secrets", ""), ("list", "", "secrets", ""), ("delete", "", "pods", ""),
    ("create", "", "pods", ""), ("create", "", "pods", "exec"), ("patch", "", "pods", ""),
    ("get", "", "services", ""), ("patch", "", "services", ""),
    ("delete", "", "services", ""),
    ("create", SLICES, "endpointslices", ""), ("patch", SLICES, "endpointslices", ""),
    ("delete", SLICES, "endpointslices", ""),
    ("patch", GROUP, "inferenceservices", "status"), ("delete", GROUP, "inferenceservices", ""),
    ("create", GROUP, "inferenceservices", ""), ("update", GROUP, "inferenceservices", ""),
    ("patch", GROUP, "slopolicies", ""), ("patch", "apps", "deployments", ""),
    ("create", "", "events", ""), ("impersonate", "", "users", ""),
    ("create", "", "serviceaccounts", "token"),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
]


async def test_activator_role_runs_its_watches_and_wake_write_and_nothing_else(
    cluster: LocalCluster, namespace: str,
) -> None:
    """The chart's activator role, for real: the activator's two cluster-wide watches list
    (it turns ready) and its wake annotation is written, as its ServiceAccount; the API
    server's authorizer refuses it everything else that matters."""
    import asyncio

    from slo_operator.activator.apiserver import KubeRoutes, KubeWaker
    from slo_operator.api.activation import ANNOTATION_WAKE, Wake, parse_wake
    from tests.runtime.rt_support import wait_until

    role = _chart_role(cluster, "activator-rbac.yaml")
    assert role["metadata"]["name"] == ACTIVATOR
    for rule in role["rules"]:
        for key in ("apiGroups", "resources", "verbs"):
            assert "*" not in rule.get(key, []), rule
    _inference_service(cluster, namespace, "chat")
    sa = f"act-{uuid.uuid4().hex[:6]}"
    kubeconfig, user = _bind_checked(cluster, role, sa,
                                     ("patch", GROUP, "inferenceservices", ""), namespace)
    api = load_api_client(str(kubeconfig))
    routes = KubeRoutes(api)
    try:
        routes.start(asyncio.get_running_loop())
        await wait_until(lambda: routes.synced, timeout=30)  # both lists answered
        wake = Wake(requested_at=1_700_000_000.5, held=2, by="activator-0")
        await KubeWaker(api).wake(namespace, "chat", wake)
    finally:
        await asyncio.to_thread(routes.stop)
        api.close()  # type: ignore[no-untyped-call]
    body = cluster.kubectl_json("get", "infsvc", "-n", namespace, "chat")
    assert parse_wake(body["metadata"]["annotations"][ANNOTATION_WAKE]) == wake
    for verb, resource in (("list", "services"), ("watch", "services")):
        assert _allowed(cluster, user, "", verb, "", resource, "")
    for verb in ("list", "watch"):
        assert _allowed(cluster, user, "", verb, SLICES, "endpointslices", "")
    assert [r for r in ACTIVATOR_NEVER if _allowed(cluster, user, namespace, *r)] == []
