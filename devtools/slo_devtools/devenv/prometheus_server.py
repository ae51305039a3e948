"""A real Prometheus on loopback for tests and the demo, fed by file-based service discovery.

The binary is Prometheus 3.x built by ``hack/build-binaries.sh`` (``SLO_PROMETHEUS`` in
``~/.cache/slo-operator/bin/slo-bin.env``), else a ``prometheus`` on ``PATH`` such as
Debian's 2.42 package (``/usr/bin/prometheus``). :attr:`PrometheusServer.version` and
:attr:`PrometheusServer.source` say which one runs.

Targets live in one JSON file (Prometheus' ``file_sd_configs`` format) that
:meth:`PrometheusServer.set_targets` rewrites atomically; Prometheus re-reads it on change
(and every ``refresh`` at the latest). The scrape interval is short (1 s by default) so a
test sees a change within seconds.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from slo_devtools.devenv.control_plane import Binaries, Component, free_port, wait_for

log = logging.getLogger("slo_devtools.devenv.prometheus_server")

JOB = "slo-pods"
DEBIAN_PROMETHEUS = Path("/usr/bin/prometheus")


@dataclass(frozen=True)
class Target:
    """One scrape endpoint and the labels its series get."""

    address: str                                   # host:port
    labels: Mapping[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"

    def group(self) -> dict[str, Any]:
        labels = dict(self.labels)
        # file_sd may set the reserved label; Prometheus turns it into the scrape path.
        labels["__metrics_path__"] = self.metrics_path
        return {"targets": [self.address], "labels": labels}


def find_binary(binaries: Binaries | None = None) -> tuple[Path, str]:
    """(prometheus binary, where it came from); raises FileNotFoundError if none."""
    b = binaries or Binaries.discover()
    if b.prometheus is not None and os.access(b.prometheus, os.X_OK):
        return b.prometheus, "slo-bin.env (hack/build-binaries.sh)" \
            if "slo-operator" in str(b.prometheus) else f"PATH ({b.prometheus})"
    if os.access(DEBIAN_PROMETHEUS, os.X_OK):
        return DEBIAN_PROMETHEUS, "Debian package"
    raise FileNotFoundError("no Prometheus binary: run hack/build-binaries.sh "
                            "(or apt-get install prometheus)")


def binary_version(binary: Path) -> str:
    """The version ``prometheus --version`` prints, e.g. "3.16.0"."""
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True,
                         timeout=30, check=False)
    m = re.search(r"version (\S+)", out.stdout + out.stderr)
    return m.group(1) if m else "unknown"


class PrometheusServer:
    """One Prometheus process; :meth:`start`, :meth:`set_targets`, :meth:`query`, :meth:`stop`."""

    def __init__(self, workdir: Path | None = None, *, scrape_interval: str = "1s",
                 refresh: str = "1s", port: int | None = None,
                 binaries: Binaries | None = None) -> None:
        self.binary, self.source = find_binary(binaries)
        self.version = binary_version(self.binary)
        self._own_dir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="slo-prometheus-"))
        self.scrape_interval = scrape_interval
        self.refresh = refresh
        self.port = port or free_port()
        self.sd_file = self.workdir / "targets.json"
        self.config_file = self.workdir / "prometheus.yml"
        self.proc: Component | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- lifecycle ---------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": self.scrape_interval,
                       "scrape_timeout": self.scrape_interval,
                       "evaluation_interval": self.scrape_interval},
            "scrape_configs": [{
                "job_name": JOB,
                # Pod labels (namespace, pod, service, tenant) come from the SD file as
                # they would from Kubernetes SD relabelling; keep them as given.
                "honor_labels": True,
                "file_sd_configs": [{"files": [str(self.sd_file)],
                                     "refresh_interval": self.refresh}],
            }],
        }

    def start(self, timeout: float = 60.0) -> PrometheusServer:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if not self.sd_file.exists():
            self.set_targets([])
        self.config_file.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        cmd = [str(self.binary), f"--config.file={self.config_file}",
               f"--storage.tsdb.path={self.workdir / 'data'}",
               f"--web.listen-address=127.0.0.1:{self.port}",
               "--storage.tsdb.retention.time=2h", "--log.level=warn"]
        self.proc = Component("prometheus", cmd, self.workdir / "prometheus.log")
        self.proc.start(self.workdir)
        proc = self.proc

        def ready() -> bool:
            proc.check_alive()
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return bool(r.status == 200)

        wait_for(ready, timeout=timeout, desc="Prometheus ready",
                 ignore=(OSError, urllib.error.URLError))
        log.info("Started Prometheus %s (%s) on %s", self.version, self.source, self.url)
        return self

    def stop_process(self) -> None:
        """Stop the server but keep its data and port: :meth:`start` brings it back (an
        outage, as the SLO loop must survive one)."""
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def stop(self) -> None:
        self.stop_process()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- targets -----------------------------------------------------------------------
    def set_targets(self, targets: Sequence[Target]) -> None:
        """Replace the discovered targets (atomic rename: never a half-written file)."""
        tmp = self.sd_file.with_suffix(".tmp")
        tmp.write_text(json.dumps([t.group() for t in targets], indent=1, sort_keys=True))
        os.replace(tmp, self.sd_file)

    # --- API ---------------------------------------------------------------------------
    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>``; the ``data`` of a successful answer."""
        qs = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{qs}", timeout=10) as r:
            doc = json.loads(r.read())
        if doc.get("status") != "success":
            raise RuntimeError(f"Prometheus {path}: {doc.get('error')}")
        return doc["data"]

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant vector query's result list."""
        data = self.api("query", query=promql)
        return list(data["result"])

    def active_targets(self) -> list[dict[str, Any]]:
        return list(self.api("targets", state="active")["activeTargets"])

    def targets_up(self, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Active targets whose last scrape succeeded and whose labels include ``labels``."""
        want = dict(labels or {})
        return [t for t in self.active_targets() if t.get("health") == "up"
                and all(t["labels"].get(k) == v for k, v in want.items())]

    def wait_target_up(self, labels: Mapping[str, str] | None = None, *, count: int = 1,
                       timeout: float = 30.0) -> list[dict[str, Any]]:
        """Wait until at least ``count`` matching targets are up."""
        def enough() -> list[dict[str, Any]]:
            up = self.targets_up(labels)
            return up if len(up) >= count else []

        return wait_for(enough, timeout=timeout,
                        desc=f"{count} Prometheus target(s) up {labels or ''}",
                        ignore=(OSError, urllib.error.URLError))

    def wait_query(self, promql: str, *, timeout: float = 30.0,
                   min_series: int = 1) -> list[dict[str, Any]]:
        """Wait until ``promql`` returns at least ``min_series`` series."""
        def enough() -> list[dict[str, Any]]:
            res = self.query(promql)
            return res if len(res) >= min_series else []

        return wait_for(enough, timeout=timeout, desc=f"series for {promql}",
                        ignore=(OSError, urllib.error.URLError))


def wait_seconds_of_scrapes(prom: PrometheusServer, n: int = 2) -> None:
    """Wait until every up target has been scraped ``n`` more times (no fixed sleep)."""
    start = {t["scrapeUrl"]: t.get("lastScrape") for t in prom.targets_up()}

    def advanced() -> bool:
        seen = {t["scrapeUrl"]: t.get("lastScrape") for t in prom.targets_up()}
        return all(seen.get(u) != s for u, s in start.items())

    for _ in range(n):
        wait_for(advanced, timeout=30.0, desc="a new scrape of every target")
        start = {t["scrapeUrl"]: t.get("lastScrape") for t in prom.targets_up()}
