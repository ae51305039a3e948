"""hack/build-binaries.sh with SLO_FETCH_RELEASES=1: release binaries come from a local HTTP
server on 127.0.0.1 laid out like the upstream hosts (dl.k8s.io, GitHub releases, get.helm.sh);
each is installed only when it matches its published sha256 and reports its version. Nothing
here reaches the internet or builds from source: SLO_NO_SOURCE_BUILD=1 turns the source build
into an immediate, reported failure, so a refused fetch is seen as the fallback decision (its
log line) and an uninstalled binary."""

from __future__ import annotations

import hashlib
import io
import os
import platform
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.support.paths import REPO

SCRIPT = REPO / "hack" / "build-binaries.sh"
# Versions no real release has, so that nothing here can be mistaken for (or overwrite) a
# binary built from the pins.
ETCD, KUBE, HELM = "v3.99.1", "v1.99.3", "v4.99.2"
PROMETHEUS_MODULE, PROMETHEUS = "v0.399.4", "3.99.4"
KUBE_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
# uname -m -> the architecture name in the projects' Linux release file names.
ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le", "s390x": "s390x"}

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.machine() not in ARCH,
                                reason="release binaries are fetched on Linux only")


def _arch() -> str:
    return ARCH[platform.machine()]


def _fake_binary(output: str) -> bytes:
    """A stand-in for a release binary: answers any version command with ``output``."""
    return f"#!/bin/sh\necho '{output}'\n".encode()


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class ReleaseServer:
    """Files by URL path, and the paths asked for."""

    url: str
    files: dict[str, bytes] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def server() -> Iterator[ReleaseServer]:
    state = ReleaseServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append(self.path)
            body = state.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()
    thread.join()


def publish_etcd(srv: ReleaseServer, reports: str = ETCD,
                 published_sum: str | None = None) -> None:
    """etcd's layout: a tarball per platform and one SHA256SUMS list for the release."""
    top = f"etcd-{ETCD}-linux-{_arch()}"
    tgz = _tar_gz({f"{top}/etcd": _fake_binary(f"etcd Version: {reports.removeprefix('v')}")})
    srv.files[f"/etcd/{ETCD}/{top}.tar.gz"] = tgz
    srv.files[f"/etcd/{ETCD}/SHA256SUMS"] = (
        f"{_sha256(b'another file')}  etcd-{ETCD}-darwin-arm64.zip\n"
        f"{published_sum or _sha256(tgz)}  {top}.tar.gz\n").encode()


def publish_helm(srv: ReleaseServer) -> None:
    name = f"helm-{HELM}-linux-{_arch()}.tar.gz"
    tgz = _tar_gz({f"linux-{_arch()}/helm": _fake_binary(f"{HELM}+gfake")})
    srv.files[f"/helm/{name}"] = tgz
    srv.files[f"/helm/{name}.sha256sum"] = f"{_sha256(tgz)}  {name}\n".encode()


def publish_kube(srv: ReleaseServer, corrupt: str | None = None) -> None:
    """dl.k8s.io's layout: each binary with a .sha256 file holding the bare hash."""
    for b in KUBE_BINARIES:
        data = _fake_binary(f"Kubernetes {KUBE}" if b != "kubectl" else f"Client Version: {KUBE}")
        path = f"/kube/{KUBE}/bin/linux/{_arch()}/{b}"
        srv.files[path] = data
        srv.files[f"{path}.sha256"] = _sha256(data + b"x" if b == corrupt else data).encode()


def publish_prometheus(srv: ReleaseServer) -> None:
    top = f"prometheus-{PROMETHEUS}.linux-{_arch()}"
    tgz = _tar_gz({f"{top}/{b}": _fake_binary(f"{b}, version {PROMETHEUS} (branch: HEAD)")
                   for b in ("prometheus", "promtool")})
    srv.files[f"/prometheus/v{PROMETHEUS}/{top}.tar.gz"] = tgz
    sums = f"{_sha256(tgz)}  {top}.tar.gz\n"
    srv.files[f"/prometheus/v{PROMETHEUS}/sha256sums.txt"] = sums.encode()


def run_script(srv: ReleaseServer, cache: Path, only: str, fetch: str = "1",
               ) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cache.parent),
        "SLO_BIN_CACHE": str(cache),
        "SLO_FETCH_RELEASES": fetch,
        "SLO_NO_SOURCE_BUILD": "1",
        "SLO_RELEASE_URL_ETCD": f"{srv.url}/etcd",
        "SLO_RELEASE_URL_KUBE": f"{srv.url}/kube",
        "SLO_RELEASE_URL_HELM": f"{srv.url}/helm",
        "SLO_RELEASE_URL_PROMETHEUS": f"{srv.url}/prometheus",
        "ETCD_VERSION": ETCD, "KUBE_VERSION": KUBE, "KUBE_FALLBACK_VERSION": KUBE,
        "HELM_VERSION": HELM, "PROMETHEUS_VERSION": PROMETHEUS_MODULE, "KWOK_VERSION": "v0.99.0",
    }
    return subprocess.run(["bash", str(SCRIPT), "--only", only], env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def env_file(cache: Path) -> dict[str, str]:
    lines = (cache / "slo-bin.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def summary(out: str) -> dict[str, str]:
    """Build summary rows: component -> how (cached, built, fetched)."""
    rows = out.split("== build summary", 1)[1].split("== env file", 1)[0].splitlines()[1:]
    return {r.split()[0]: r.split()[-1] for r in rows if r.strip()}


def test_verified_releases_are_installed_recorded_as_fetched_and_then_cached(
        server: ReleaseServer, tmp_path: Path) -> None:
    publish_etcd(server)
    publish_helm(server)
    publish_kube(server)
    publish_prometheus(server)
    cache = tmp_path / "bin"

    first = run_script(server, cache, "etcd,kube,helm,prometheus")

    assert first.returncode == 0, first.stdout + first.stderr
    assert summary(first.stdout) == {"etcd": "fetched", "kubernetes": "fetched",
                                     "helm": "fetched", "prometheus": "fetched"}
    env = env_file(cache)
    expected = {"SLO_ETCD": cache / f"etcd-{ETCD}" / "etcd",
                "SLO_HELM": cache / f"helm-{HELM}" / "helm",
                "SLO_PROMETHEUS": cache / f"prometheus-{PROMETHEUS_MODULE}" / "prometheus",
                "SLO_PROMTOOL": cache / f"prometheus-{PROMETHEUS_MODULE}" / "promtool",
                "SLO_KUBECTL": cache / f"kubectl-{KUBE}" / "kubectl",
                "SLO_KUBE_APISERVER": cache / f"kube-apiserver-{KUBE}" / "kube-apiserver"}
    for key, path in expected.items():
        assert env[key] == str(path)
        assert path.is_file() and path.stat().st_mode & 0o111
    assert env["SLO_PROMETHEUS_VERSION"] == PROMETHEUS and env["SLO_KUBE_VERSION"] == KUBE
    assert not list((cache / "src").glob("release-*")), "staging folders are removed"

    server.requests.clear()
    second = run_script(server, cache, "etcd,kube,helm,prometheus")

    assert second.returncode == 0, second.stdout + second.stderr
    assert set(summary(second.stdout).values()) == {"cached"}
    assert server.requests == []


def test_wrong_checksum_is_refused_and_falls_back_to_the_source_build(
        server: ReleaseServer, tmp_path: Path) -> None:
    publish_etcd(server, published_sum="0" * 64)
    cache = tmp_path / "bin"

    result = run_script(server, cache, "etcd")

    assert result.returncode == 1
    assert "sha256 mismatch" in result.stderr
    assert "falling back to the source build" in result.stderr
    assert "etcd: not built from source (SLO_NO_SOURCE_BUILD=1)" in result.stderr
    assert not (cache / f"etcd-{ETCD}").exists()
    assert "SLO_ETCD" not in env_file(cache)
    assert "!! failed: etcd" in result.stderr


def test_one_bad_kubernetes_binary_installs_none_of_the_four(
        server: ReleaseServer, tmp_path: Path) -> None:
    publish_kube(server, corrupt="kube-scheduler")
    cache = tmp_path / "bin"

    result = run_script(server, cache, "kube")

    assert result.returncode == 1
    assert "sha256 mismatch for kube-scheduler" in result.stderr
    assert not [p for b in KUBE_BINARIES for p in cache.glob(f"{b}-*")]
    assert not any(k.startswith("SLO_KUBE") for k in env_file(cache))


def test_missing_checksum_file_is_refused(server: ReleaseServer, tmp_path: Path) -> None:
    publish_helm(server)
    del server.files[f"/helm/helm-{HELM}-linux-{_arch()}.tar.gz.sha256sum"]
    cache = tmp_path / "bin"

    result = run_script(server, cache, "helm")

    assert result.returncode == 1
    assert "404" in result.stderr and "falling back to the source build" in result.stderr
    assert not (cache / f"helm-{HELM}").exists()


def test_verified_binary_reporting_another_version_is_refused(
        server: ReleaseServer, tmp_path: Path) -> None:
    publish_etcd(server, reports="v3.6.0")
    cache = tmp_path / "bin"

    result = run_script(server, cache, "etcd")

    assert result.returncode == 1
    assert f"etcd does not run here or does not report {ETCD}" in result.stderr
    assert not (cache / f"etcd-{ETCD}").exists()


def test_kwok_is_never_fetched(server: ReleaseServer, tmp_path: Path) -> None:
    result = run_script(server, tmp_path / "bin", "kwok")

    assert "no published checksums, so built from source" in result.stdout
    assert "kwok: not built from source" in result.stderr
    assert server.requests == []


def test_without_the_variable_nothing_is_downloaded(server: ReleaseServer, tmp_path: Path) -> None:
    publish_etcd(server)
    cache = tmp_path / "bin"

    result = run_script(server, cache, "etcd", fetch="")

    assert server.requests == []
    assert ">> fetching" not in result.stdout
    assert result.returncode == 1 and not (cache / f"etcd-{ETCD}").exists()


def test_unrecognised_value_names_the_variable_and_value(
        server: ReleaseServer, tmp_path: Path) -> None:
    result = run_script(server, tmp_path / "bin", "etcd", fetch="maybe")

    assert result.returncode == 2
    assert "SLO_FETCH_RELEASES=maybe: expected 1 (on) or 0 (off)" in result.stderr
    assert server.requests == []
