"""Pytest fixtures for tests against the real local control plane (devenv.control_plane).

A suite's conftest.py imports them (``from tests.support.fixtures import *``); each suite that
does gets its own session cluster. Without built binaries the cluster tests are skipped locally,
but fail under CI: a CI run that silently skipped them would prove nothing.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator, Iterator

import kubernetes.client
import pytest
from kubernetes.client.exceptions import ApiException

from slo_devtools.devenv.control_plane import Binaries, LocalCluster

__all__ = ["cluster", "kube_api", "namespace", "pytest_runtest_makereport"]


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Iterator[LocalCluster]:
    binaries = Binaries.discover()
    missing = binaries.missing()
    if missing:
        msg = (
            f"control-plane binaries not built ({', '.join(missing)}); "
            "run `bash hack/build-binaries.sh`"
        )
        if _in_ci():
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    c = LocalCluster(binaries=binaries)
    c.start()
    try:
        yield c
    finally:
        if request.session.testsfailed:
            dest = c.save_logs("session")
            print(f"\ncontrol-plane logs copied to {dest}", file=sys.stderr)
        c.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    c = getattr(item, "funcargs", {}).get("cluster")
    if report.failed and isinstance(c, LocalCluster):
        dest = c.save_logs(item.nodeid)
        report.sections.append(("control-plane logs", f"copied to {dest}"))
    return report


@pytest.fixture(scope="session")
def kube_api(cluster: LocalCluster) -> Iterator[kubernetes.client.ApiClient]:
    """An admin ``kubernetes`` ApiClient for the local cluster."""
    api = cluster.api_client()
    try:
        yield api
    finally:
        api.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    """A fresh namespace; afterwards it is deleted and its pods are gone (their GPUs free)."""
    name = cluster.create_namespace()
    yield name
    core = cluster.core
    try:
        core.delete_namespace(name)
    except ApiException as e:
        if e.status != 404:
            raise
        return
    # A terminating namespace admits no new pods, so once these are gone the GPUs stay free.
    # Skipping the grace period saves the namespace controller's 30 s back-off on fake pods
    # that have no process to stop.
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    cluster.wait_for(
        lambda: not core.list_namespaced_pod(name).items,
        timeout=90,
        desc=f"pods of namespace {name} deleted",
    )
