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
