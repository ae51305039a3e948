"""The operator started from the built image's filesystem against the local control plane.

Needs an image built daemonlessly by ``hack/build-image.sh`` (buildah, vfs storage): the
test runs ``slo-operator run`` inside that filesystem (chroot isolation, host network) as
UID 65532 and checks that it serves its health endpoint and reconciles an example. It
skips when buildah or the image is absent.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster, free_port
from tests.integration.operator_support import ROOT, conditions, install_crds

pytestmark = pytest.mark.integration

IMAGE = os.environ.get("SLO_TEST_IMAGE", "localhost/slo-operator:dev")
BUILDAH = ["buildah"]
# The storage settings hack/build-image.sh builds with.
ENV = {**os.environ, "STORAGE_DRIVER": "vfs", "BUILDAH_ISOLATION": "chroot"}


def _buildah(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BUILDAH, *args], capture_output=True, text=True, check=check,
                          timeout=300, env=ENV)


@pytest.fixture
def container() -> Iterator[str]:
    if shutil.which("buildah") is None:
        pytest.skip("buildah not installed (apt-get install buildah)")
    if _buildah("inspect", "--type", "image", IMAGE, check=False).returncode != 0:
        pytest.skip(f"{IMAGE} not built: run `hack/build-image.sh`")
    ctr = _buildah("from", IMAGE).stdout.strip().splitlines()[-1]
    try:
        yield ctr
    finally:
        _buildah("rm", ctr, check=False)


def test_operator_runs_from_the_image_as_non_root(cluster: LocalCluster, container: str,
                                                  namespace: str, tmp_path: Path) -> None:
    cfg = _buildah("inspect", "--type", "container", "--format",
                   "{{.OCIv1.Config.User}} {{.OCIv1.Config.Entrypoint}}", container).stdout
    assert cfg.startswith("65532:65532 [slo-operator]"), cfg
    install_crds(cluster)
    kubeconfig = tmp_path / "kubeconfig"
    shutil.copy(cluster.kubeconfig, kubeconfig)
    kubeconfig.chmod(0o644)  # readable by the image's non-root user
    port = free_port()
    _buildah("config", "--env", "KUBECONFIG=/kube/config", "--env", "SLO_RECONCILE_INTERVAL=3",
             container)
    log = (tmp_path / "operator.log").open("w")
    proc = subprocess.Popen(
        [*BUILDAH, "run", "--isolation", "chroot", "--user", "65532:65532",
         "-v", f"{kubeconfig}:/kube/config:ro", container, "--",
         "slo-operator", "run", "--liveness", f"http://127.0.0.1:{port}/healthz"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=ENV)

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError((tmp_path / "operator.log").read_text())
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    try:
        cluster.wait_for(healthy, timeout=120, desc="operator from the image healthy")
        docs = [d for d in yaml.safe_load_all(
            (ROOT / "examples" / "llama-8b-h100.yaml").read_text()) if d]
        for d in docs:
            d["metadata"]["namespace"] = namespace
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
        cluster.wait_for(lambda: "Ready" in conditions(
            cluster.kubectl_json("get", "infsvc", "-n", namespace, "llama-8b")),
            timeout=120, desc="example reconciled by the operator from the image")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
