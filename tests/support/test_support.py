"""Checks of the cluster support code that need no running cluster."""

from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from slo_devtools.devenv import gpu_nodes as fleet
from slo_devtools.devenv.control_plane import Binaries, free_port, wait_for
from slo_devtools.devenv.pki import CertificateAuthority, write_kubeconfig

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_leaf_certificates_are_signed_by_the_ca(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path, validity=dt.timedelta(days=1), now=NOW)
    serving = ca.serving("apiserver", dns=["kubernetes.default"], ips=["127.0.0.1"])
    client = ca.client("admin", user="kubernetes-admin", groups=("system:masters",))
    ca_cert = load(ca.pair.cert)
    for pair in (serving, client):
        cert = load(pair.cert)
        cert.verify_directly_issued_by(ca_cert)
        assert cert.not_valid_after_utc == NOW + dt.timedelta(days=1)
        assert stat.S_IMODE(os.stat(pair.key).st_mode) == 0o600

    sans = load(serving.cert).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert sans.value.get_values_for_type(x509.DNSName) == ["kubernetes.default"]
    assert [str(ip) for ip in sans.value.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    eku = load(serving.cert).extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    assert list(eku.value) == [ExtendedKeyUsageOID.SERVER_AUTH]

    # kube-apiserver takes the user from CN and the groups from O.
    subject = load(client.cert).subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kubernetes-admin"
    assert subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"
    assert isinstance(load(client.cert).public_key(), ec.EllipticCurvePublicKey)


def test_kubeconfig_is_self_contained(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path, validity=dt.timedelta(days=1), now=NOW)
    path = write_kubeconfig(
        tmp_path / "kc", server="https://127.0.0.1:1", ca=ca.pair.cert, user="sa", token="t0k"
    )
    doc = yaml.safe_load(path.read_text())
    assert doc["current-context"] == "sa"
    assert doc["users"][0]["user"] == {"token": "t0k"}
    assert doc["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:1"
    assert "certificate-authority-data" in doc["clusters"][0]["cluster"]


def test_default_fleet_matches_published_label_sets() -> None:
    manifests = fleet.fleet_manifests(fleet.default_fleet())
    by_name = {m["metadata"]["name"]: m for m in manifests}
    assert sorted(by_name) == sorted(
        ["kwok-h100-0", "kwok-h100-1", "kwok-a100-0", "kwok-a100-1", "kwok-l4-0", "kwok-mi300x-0"]
    )
    h100 = by_name["kwok-h100-0"]["metadata"]["labels"]
    published = fleet.fixture_labels("NVIDIA-H100-80GB-HBM3")
    assert {k: v for k, v in h100.items() if k in published and k != "nvidia.com/gpu.count"} == {
        k: v for k, v in published.items() if k != "nvidia.com/gpu.count"
    }
    a100 = by_name["kwok-a100-0"]["metadata"]["labels"]
    assert a100["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
    assert a100["nvidia.com/gpu.family"] == "ampere"
    assert "nvidia.com/gpu.machine" not in a100
    l4 = by_name["kwok-l4-0"]["metadata"]["labels"]
    assert (l4["nvidia.com/gpu.compute.major"], l4["nvidia.com/gpu.compute.minor"]) == ("8", "9")
    assert l4["nvidia.com/gpu.family"] == "ada-lovelace"
    assert "nvidia.com/mig.strategy" not in l4
    mi300x = by_name["kwok-mi300x-0"]
    assert mi300x["metadata"]["labels"]["amd.com/gpu.device-id"] == "74a1"
    assert mi300x["status"]["allocatable"]["amd.com/gpu"] == "8"
    assert "nvidia.com/gpu" not in mi300x["status"]["allocatable"]
    for m in manifests:
        assert m["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
        assert m["metadata"]["labels"]["type"] == "kwok"
        assert m["spec"]["taints"] == []


def test_kwok_taint_is_opt_in() -> None:
    [node] = fleet.fleet_manifests([fleet.NodeGroup(fleet.l4(gpus=2), 1)], taint=True)
    assert node["spec"]["taints"] == [fleet.KWOK_TAINT]
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "2"


def test_binaries_env_file_and_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("SLO_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("SLO_BIN_CACHE", str(tmp_path))
    etcd = tmp_path / "etcd"
    etcd.write_text("#!/bin/sh\n")
    etcd.chmod(0o755)
    (tmp_path / "slo-bin.env").write_text(
        f"SLO_ETCD={etcd}\nSLO_KUBE_APISERVER=/nonexistent\nSLO_KUBE_VERSION=v1.37.2\n"
    )
    b = Binaries.discover()
    assert b.etcd == etcd
    assert b.kube_version == "v1.37.2"
    assert "etcd" not in b.missing()
    assert "kube-apiserver" in b.missing()
    monkeypatch.setenv("SLO_KUBE_APISERVER", str(etcd))
    assert "kube-apiserver" not in Binaries.discover().missing()


def test_wait_for_returns_value_and_reports_timeout() -> None:
    calls = iter([None, 0, "ready"])
    assert wait_for(lambda: next(calls), timeout=5, interval=0.001) == "ready"

    def boom() -> bool:
        raise ConnectionRefusedError("not yet")

    with pytest.raises(TimeoutError, match=r"widget.*ConnectionRefusedError"):
        wait_for(boom, timeout=0, desc="widget", ignore=(OSError,))
    with pytest.raises(ZeroDivisionError):
        wait_for(lambda: 1 / 0, timeout=5)


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
