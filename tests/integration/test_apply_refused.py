"""One service whose objects the API server refuses is isolated and explained.

An admission policy makes the API server refuse the Service of one InferenceService. The
real operator reports ``Ready=False ApplyFailed`` with the API server's message and one
Warning Event, retries only after a back-off, logs no traceback, and keeps reconciling
the neighbouring service.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster
from slo_operator.api.models import GROUP
from tests.integration.operator_support import (
    chart_operator,
    conditions,
    events_for,
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
