"""One service whose objects the API server refuses is isolated and explained.

An admission policy makes the API server refuse the Service of one InferenceService. The
real operator reports ``Ready=False ApplyFailed`` with the API server's message and one
Warning Event, retries only after a back-off, logs no traceback, and keeps reconciling
the neighbouring service. A service whose namespace is being deleted under it is
reconciled without an error escaping: the refusal is reported, its gone status skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.adapters.kube import Kube
from slo_operator.api.models import GROUP
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.service import Settings, reconcile_service_sync
from tests.integration.operator_support import (
    chart_operator,
    conditions,
    events_for,
    install_crds,
)

pytestmark = pytest.mark.integration
REFUSAL = "Services named bad are refused by this cluster's policy"


@pytest.fixture
def refusing_policy(cluster: LocalCluster, namespace: str) -> Iterator[None]:
    name = f"refuse-bad-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["services"]}]},
            "validations": [{"expression": "object.metadata.name != 'bad'",
                             "message": REFUSAL}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": namespace}}}},
    }
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([policy, binding]))
    probe = yaml.safe_dump({"apiVersion": "v1", "kind": "Service",
                            "metadata": {"name": "bad", "namespace": namespace},
                            "spec": {"ports": [{"port": 80}]}})
    cluster.wait_for(
        lambda: REFUSAL in cluster.kubectl("apply", "--dry-run=server", "-f", "-",
                                           input=probe, check=False).stderr,
        timeout=60, desc="admission policy in force")
    try:
        yield
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                        name, check=False)


def test_a_refused_service_is_isolated_and_explained(
    cluster: LocalCluster, namespace: str, refusing_policy: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with chart_operator(cluster, tmp_path_factory.mktemp("refused"), "slo-refused",
                        interval=1.0, log_tail=3000) as op:
        docs = [{"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
                 "metadata": {"name": name},
                 "spec": {"model": {"name": f"org/{name}", "sizeBillions": 8},
                          "hardware": {"gpuProducts": ["H100"]}}}
                for name in ("bad", "good")]
        cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs))

        def ready(name: str) -> dict[str, object] | None:
            svc = cluster.kubectl_json("get", "infsvc", "-n", namespace, name)
            c = conditions(svc).get("Ready")
            return c if c else None

        bad = cluster.wait_for(
            lambda: (c := ready("bad")) and c["reason"] == "ApplyFailed" and c,
            timeout=90, desc="bad: Ready=False ApplyFailed")
        assert bad["status"] == "False"
        assert REFUSAL in str(bad["message"]) and "Service bad" in str(bad["message"])
        cluster.wait_for(lambda: (c := ready("good")) and c["status"] == "True",
                         timeout=120, desc="good: Ready=True")

        # Several more passes: still one Warning, no traceback, the operator alive.
        def passes() -> int:
            found = re.findall(r"Finished periodic pass (\d+)", op.logs())
            return int(found[-1]) if found else 0

        first = passes()
        cluster.wait_for(lambda: passes() >= first + 5, timeout=60, desc="five more passes")
        warnings = [e for e in events_for(cluster, namespace, "bad")
                    if e["reason"] == "ApplyFailed"]
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning"
        assert warnings[0].get("count", 1) == 1
        assert "Traceback" not in op.logs()
        assert op.proc.poll() is None


HOLD = "slo-operator.io/test-hold"


def test_a_service_whose_namespace_is_being_deleted_is_reconciled_without_an_error(
    cluster: LocalCluster,
) -> None:
    # The operator's cache still holds the service when the namespace controller has
    # deleted it: the applies are refused (namespace terminating) and the refusal's status
    # patch finds nothing. Neither may escape the reconcile (kopf logs it as a traceback).
    install_crds(cluster)
    ns = cluster.create_namespace()
    hold = {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "hold", "namespace": ns, "finalizers": [HOLD]}}
    svc = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
           "metadata": {"name": "llama-3.1-8b", "namespace": ns},
           "spec": {"model": {"name": "meta-llama/Llama-3.1-8B", "sizeBillions": 8},
                    "hardware": {"gpuProducts": ["H100"]}}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([hold, svc]))
    api = cluster.api_client()
    kube = Kube(api)
    try:
        snap = kube.read_snapshot()
        body = snap.services[(ns, "llama-3.1-8b")]
        cluster.kubectl("delete", "namespace", ns, "--wait=false")
        cluster.wait_for(
            lambda: not cluster.kubectl("get", "infsvc", "-n", ns, "-o", "name").stdout.strip(),
            timeout=60, desc="the service deleted with its namespace")

        outcome = reconcile_service_sync(kube, body, snap, datetime.now(UTC), Settings(),
                                         AppliedCache())

        ready = conditions({"status": outcome.status})["Ready"]
        assert ready["status"] == "False" and ready["reason"] == "ApplyFailed"
        assert "being terminated" in str(ready["message"])
        assert outcome.retry_after and outcome.retry_after > 0
        assert outcome.applied == []
    finally:
        cluster.kubectl("patch", "configmap", "hold", "-n", ns, "--type=json",
                        "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]',
                        check=False)
        api.close()  # type: ignore[no-untyped-call]
