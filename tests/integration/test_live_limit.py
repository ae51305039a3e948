"""The live batch limit moves on the running pods only: no rollout, no restart."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from slo_devtools.devenv.control_plane import LocalCluster, free_port
from slo_operator.adapters.kube import Kube
from slo_operator.api.models import GROUP
from slo_operator.reconcile.ports import AppliedCache
from slo_operator.reconcile.service import Settings, reconcile_service_sync
from slo_operator.reconcile.status import SLOUpdate
from slo_operator.render.objects import ANNOTATION_INFLIGHT_LIMIT
from slo_runtime.contract import (
    ENV_INFLIGHT_LIMIT_FILE,
    ENV_PROBE_FILE,
    LIMIT_FILE,
    LIMIT_FILE_NAME,
)
from tests.integration.operator_support import install_crds, only_deployment

pytestmark = pytest.mark.integration
APPLIED = AppliedCache()  # one operator's memory of what it applied


def _pods(cluster: LocalCluster, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cluster.kubectl_json(
        "get", "pods", "-n", ns, "-l", f"{GROUP}/service=chat")["items"]
    return items


def test_live_limit_change_patches_pods_only(cluster: LocalCluster, namespace: str,
                                            tmp_path: Path) -> None:
    install_crds(cluster)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=f"""
apiVersion: {GROUP}/v1alpha1
kind: SLOPolicy
metadata: {{name: gold}}
spec:
  scaling: {{minReplicas: 2, maxReplicas: 2}}
  batching: {{mode: live, minBatch: 8, maxBatch: 64}}
---
apiVersion: {GROUP}/v1alpha1
kind: InferenceService
metadata: {{name: chat}}
spec:
  model: {{name: org/chat, sizeBillions: 8}}
  hardware: {{gpuProducts: [H100]}}
  sloPolicyRef: {{name: gold}}
""")
    api = cluster.api_client()
    kube = Kube(api)

    def reconcile() -> None:
        snap = kube.read_snapshot()
        reconcile_service_sync(kube, snap.services[(namespace, "chat")], snap,
                               datetime.now(UTC), Settings(), APPLIED)

    reconcile()
    cluster.wait_for(lambda: [p for p in _pods(cluster, namespace)
                              if p["status"].get("phase") == "Running"] and
                     len(_pods(cluster, namespace)) == 2,
                     timeout=90, desc="two pods running")
    reconcile()  # sets the starting limit on the new pods: the ceiling
    before_pods = _pods(cluster, namespace)
    assert {p["metadata"]["annotations"][ANNOTATION_INFLIGHT_LIMIT] for p in before_pods} == {
        "64"}
    before_dep = only_deployment(cluster, namespace, "chat")
    # kwok runs no containers: start the gateway exactly as the applied template says,
    # with a kubelet-style downward-API volume fed from the first pod's annotation.
    volume = DownwardVolume(tmp_path / "limit")
    volume.write(before_pods[0]["metadata"]["annotations"][ANNOTATION_INFLIGHT_LIMIT])
    gateway = GatewayProcess(before_dep, volume, tmp_path / "gateway.log")
    try:
        cluster.wait_for(lambda: gateway.limit() == 64, timeout=30, desc="gateway at 64")

        patched = set_live_limit(kube, namespace, 24)

        first = cluster.kubectl_json("get", "pod", "-n", namespace,
                                     before_pods[0]["metadata"]["name"])
        volume.write(first["metadata"]["annotations"][ANNOTATION_INFLIGHT_LIMIT])
        cluster.wait_for(lambda: gateway.limit() == 24, timeout=30, desc="gateway at 24")
        assert gateway.proc.poll() is None  # the same process: no restart
    finally:
        gateway.stop()

    after_pods = _pods(cluster, namespace)
    after_dep = only_deployment(cluster, namespace, "chat")
    assert sorted(patched) == sorted(p["metadata"]["name"] for p in before_pods)
    assert {p["metadata"]["annotations"][ANNOTATION_INFLIGHT_LIMIT] for p in after_pods} == {
        "24"}
    assert ({p["metadata"]["uid"] for p in after_pods}
            == {p["metadata"]["uid"] for p in before_pods})
    assert after_dep["spec"]["template"] == before_dep["spec"]["template"]
    assert after_dep["metadata"]["generation"] == before_dep["metadata"]["generation"]
    # A second call with the same limit writes nothing.
    assert set_live_limit(kube, namespace, 24) == []
    api.close()  # type: ignore[no-untyped-call]


def set_live_limit(kube: Kube, namespace: str, limit: int) -> list[str]:
    """What the SLO loop's pass does with a decided limit: one reconcile carrying the
    decision (``SLOUpdate``); returns the pods it patched."""
    snap = kube.read_snapshot()
    body = snap.services[(namespace, "chat")]
    update = SLOUpdate(replicas=body["status"]["desiredReplicas"], batch_limit=limit,
                       reason="LimitLowered", message="test")
    out = reconcile_service_sync(kube, body, snap, datetime.now(UTC), Settings(),
                                 APPLIED, update)
    assert not [a for a in out.applied if not a.startswith("Pod/")], out.applied
    return [a.split("/", 1)[1].split(" ")[0] for a in out.applied]


class DownwardVolume:
    """A downward-API volume as the kubelet writes it: the file is a symlink into a
    timestamped directory that is swapped atomically (``..data``) on every update."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True)
        (root / LIMIT_FILE_NAME).symlink_to(Path("..data") / LIMIT_FILE_NAME)
        self.version = 0

    @property
    def file(self) -> Path:
        return self.root / LIMIT_FILE_NAME

    def write(self, value: str) -> None:
        self.version += 1
        target = self.root / f"..v{self.version}"
        target.mkdir()
        (target / LIMIT_FILE_NAME).write_text(value)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(target.name)
        os.replace(tmp, self.root / "..data")


class GatewayProcess:
    """The gateway container of a Deployment's pod template, run as a local process."""

    def __init__(self, dep: dict[str, Any], volume: DownwardVolume, log: Path) -> None:
        spec = dep["spec"]["template"]["spec"]
        container = next(c for c in spec["containers"] if c["name"] == "gateway")
        env = {e["name"]: e.get("value", "") for e in container["env"]}
        assert env[ENV_INFLIGHT_LIMIT_FILE] == LIMIT_FILE
        env[ENV_INFLIGHT_LIMIT_FILE] = str(volume.file)  # the mount, moved to tmp
        env.pop(ENV_PROBE_FILE, None)
        self.port = free_port()
        argv = list(container["command"])
        assert argv[0] == "slo-runtime"
        argv[argv.index("--port") + 1] = str(self.port)
        self._log = open(log, "w")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slo_runtime.cli", *argv[1:], "--host", "127.0.0.1"],
            env={**os.environ, **env}, stdout=self._log, stderr=subprocess.STDOUT)

    def limit(self) -> int | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                        timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        m = re.search(r"^slo_gateway_inflight_limit (\S+)$", text, re.M)
        return int(float(m.group(1))) if m else None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()
