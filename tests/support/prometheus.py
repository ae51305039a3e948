"""Pytest fixtures for a real Prometheus (slo_devtools.devenv.prometheus_server) on loopback.

Without a Prometheus binary the tests that use it are skipped locally and fail under CI,
like the control-plane fixtures.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from slo_devtools.devenv.prometheus_server import PrometheusServer, find_binary

__all__ = ["prometheus", "prometheus_binary"]


@pytest.fixture(scope="session")
def prometheus_binary() -> tuple[Path, str]:
    """(binary, source) or a skip (a failure under CI)."""
    try:
        return find_binary()
    except FileNotFoundError as e:
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(str(e), pytrace=False)
        pytest.skip(str(e))


@pytest.fixture
def prometheus(prometheus_binary: tuple[Path, str], tmp_path: Path,
               request: pytest.FixtureRequest) -> Iterator[PrometheusServer]:
    """A fresh Prometheus (1 s scrapes, file SD) per test; its log is kept on failure."""
    prom = PrometheusServer(tmp_path / "prometheus", scrape_interval="1s").start()
    try:
        yield prom
    finally:
        failed = request.session.testsfailed
        prom.stop()
        if failed:
            dest = Path("_out") / "prometheus-logs" / request.node.name
            dest.mkdir(parents=True, exist_ok=True)
            log = tmp_path / "prometheus" / "prometheus.log"
            if log.exists():
                shutil.copy(log, dest / "prometheus.log")
                print(f"\nPrometheus log copied to {dest}", file=sys.stderr)
