"""The processes and objects of one demo run, each stopped or removed on the way out.

Order of start: control plane (with fake GPU nodes) -> Prometheus -> Helm chart (CRDs, RBAC,
ServiceAccount) -> the operator as a local process under the chart's ServiceAccount ->
tenants -> replica models -> trace replay. :class:`Stack` is a context manager whose exit
undoes everything in reverse, on success, on errors and on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import kubernetes.client
import yaml
from rich.console import Console

from slo_devtools.demo.build import format_duration
from slo_devtools.demo.scenario import CHART, OPERATOR_NAMESPACE, RELEASE
from slo_devtools.devenv.control_plane import Binaries, Component, LocalCluster, free_port, wait_for
from slo_devtools.devenv.prometheus_server import PrometheusServer
from slo_devtools.devenv.replica_pods import ReplicaHarness
from slo_operator.api.models import GROUP, VERSION

# The operator's periodic pass in the demo: short, because the replay compresses time.
RECONCILE_INTERVAL_S = 2.0
PROMETHEUS_URL_ENV = "SLO_PROMETHEUS_URL"
# The ServiceAccount token must outlive a long `--keep` session.
TOKEN_SECONDS = 7 * 24 * 3600


class DemoError(RuntimeError):
    pass


@dataclass
class Timings:
    """Seconds each startup phase took (reported in summary.json and the docs)."""

    phases: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def phase(self, name: str, console: Console, what: str) -> Iterator[None]:
        t0 = time.monotonic()
        with console.status(what + "..."):
            yield
        self.phases[name] = round(time.monotonic() - t0, 2)
        console.print(f"[green]✓[/] {what} ({format_duration(self.phases[name])})")


class Stack:
    """Everything the demo starts, torn down in reverse on exit."""

    def __init__(self, binaries: Binaries, console: Console, out_dir: Path) -> None:
        self.binaries = binaries
        self.console = console
        self.out_dir = out_dir
        self.timings = Timings()
        self.workdir = Path(tempfile.mkdtemp(prefix="slo-demo-"))
        self.cluster = LocalCluster(binaries=binaries, workdir=self.workdir / "cluster")
        self.operator: Component | None = None
        self.operator_port = 0
        self.operator_kubeconfig: Path | None = None
        self.prometheus_url: str | None = None
        self._cleanups: list[tuple[str, Callable[[], None]]] = []
        # kubectl and helm keep discovery caches and settings under $HOME; point them into
        # the work directory so that nothing outlives the run.
        tools = {"KUBECACHEDIR": "kube-cache", "HELM_CACHE_HOME": "helm/cache",
                 "HELM_CONFIG_HOME": "helm/config", "HELM_DATA_HOME": "helm/data"}
        self._saved_env = {k: os.environ.get(k) for k in tools}
        os.environ.update({k: str(self.workdir / v) for k, v in tools.items()})

    # ----- lifecycle ------------------------------------------------------------------

    def __enter__(self) -> Stack:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def on_close(self, name: str, fn: Callable[[], None]) -> None:
        """Run ``fn`` when the stack closes (last registered first)."""
        self._cleanups.append((name, fn))

    def close(self) -> None:
        """Stop everything started, newest first; save logs; remove the work directory."""
        while self._cleanups:
            name, fn = self._cleanups.pop()
            try:
                fn()
            except Exception as e:  # one failed stop must not leave the rest running
                self.console.print(f"[yellow]stopping {name} failed: {e}[/]")
        if self.cluster.logs_dir.is_dir():
            # Component logs (operator included) stay with the run's results.
            dest = self.cluster.save_logs("logs", root=self.out_dir)
            for log in self.workdir.rglob("*.log"):
                if log.parent != self.cluster.logs_dir:
                    shutil.copy2(log, dest / log.name)
        self.cluster.stop()
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.workdir, ignore_errors=True)

    # ----- phases ---------------------------------------------------------------------

    def start_cluster(self) -> None:
        (self.workdir / "cluster").mkdir(parents=True, exist_ok=True)
        with self.timings.phase("cluster", self.console,
                                "Started etcd, kube-apiserver, controller-manager, scheduler, "
                                "kwok and fake GPU nodes"):
            self.cluster.start()
        nodes = ", ".join(self.cluster.node_names)
        self.console.print(f"  fake GPU nodes: {nodes}")

    def start_prometheus(self) -> PrometheusServer:
        """Prometheus on loopback; the replica harness registers each pod through file SD."""
        with self.timings.phase("prometheus", self.console, "Started Prometheus"):
            prom = PrometheusServer(self.workdir / "prometheus", binaries=self.binaries).start()
            self.on_close("Prometheus", prom.stop)
            self.prometheus_url = prom.url
        self.console.print(f"  Prometheus {prom.version} ({prom.source}) at {prom.url}")
        return prom

    def start_replicas(self, prometheus: PrometheusServer, cold_start_s: float
                       ) -> ReplicaHarness:
        """A replica model of vLLM behind the real gateway for every Running pod; step times
        are real (latencies are what a GPU would give), the cold start is ``cold_start_s``."""
        with self.timings.phase("replicas", self.console,
                                "Started the replica harness (one vLLM model per Running pod)"):
            api = self.cluster.api_client()
            harness = ReplicaHarness(api, prometheus=prometheus, cold_start_s=cold_start_s,
                                     workdir=self.workdir / "replicas").start()

            def stop() -> None:
                harness.stop()
                api.close()  # type: ignore[no-untyped-call]

            self.on_close("replica harness", stop)
        return harness

    def install_chart(self) -> tuple[str, str]:
        """Install the chart (CRDs, RBAC, ServiceAccount) and return the operator Deployment's
        name and ServiceAccount. The chart's Deployment is scaled to zero: kwok pods run no
        code, so the operator runs as a local process under that ServiceAccount instead."""
        c = self.cluster
        with self.timings.phase("chart", self.console,
                                f"Installed the Helm chart {CHART.name} into {OPERATOR_NAMESPACE}"):
            c.helm("install", RELEASE, str(CHART), "--namespace", OPERATOR_NAMESPACE,
                   "--create-namespace")
            for crd in ("inferenceservices", "slopolicies"):
                c.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                          f"crd/{crd}.{GROUP}")
            # The operator's own Deployment (the chart's activator has its own name label).
            deps = c.kubectl_json("get", "deployment", "-n", OPERATOR_NAMESPACE, "-l",
                                  f"app.kubernetes.io/instance={RELEASE},"
                                  "app.kubernetes.io/name=slo-operator")["items"]
            if len(deps) != 1:
                raise DemoError(f"the chart installed {len(deps)} operator Deployments, "
                                "expected 1")
            dep = deps[0]
            name = dep["metadata"]["name"]
            sa = dep["spec"]["template"]["spec"].get("serviceAccountName") or "default"
            c.kubectl("scale", "deployment", name, "-n", OPERATOR_NAMESPACE, "--replicas=0")
        return name, sa

    def start_operator(self, service_account: str, prometheus_url: str | None) -> None:
        """``slo-operator run`` as a local process with exactly the chart's RBAC."""
        c = self.cluster
        with self.timings.phase("operator", self.console,
                                f"Started the operator as ServiceAccount "
                                f"{OPERATOR_NAMESPACE}/{service_account}"):
            kubeconfig = c.sa_kubeconfig(OPERATOR_NAMESPACE, service_account, create=False,
                                         expiration_seconds=TOKEN_SECONDS)
            self.operator_kubeconfig = kubeconfig
            self.operator_port = free_port()
            cmd = [sys.executable, "-m", "slo_operator.cli", "run",
                   "--kubeconfig", str(kubeconfig),
                   "--liveness", f"http://127.0.0.1:{self.operator_port}/healthz"]
            env = {**os.environ, "SLO_RECONCILE_INTERVAL": f"{RECONCILE_INTERVAL_S:g}",
                   "SLO_KUBECONFIG": str(kubeconfig), "KUBECONFIG": str(kubeconfig)}
            if prometheus_url:
                # `slo-operator run --prometheus-url` reads this variable.
                env[PROMETHEUS_URL_ENV] = prometheus_url
            self.operator = c.spawn("slo-operator", cmd, env=env)
            wait_for(self._operator_healthy, timeout=60, desc="operator liveness endpoint")

    def _operator_healthy(self) -> bool:
        op = self.operator
        assert op is not None
        if not op.alive():
            raise DemoError(f"the operator exited; last log lines:\n{op.tail()}")
        try:
            url = f"http://127.0.0.1:{self.operator_port}/healthz"
            with urllib.request.urlopen(url, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def check_operator(self) -> None:
        """Raise if the operator process has died (the demo would show a frozen cluster)."""
        op = self.operator
        if op is not None and not op.alive():
            raise DemoError(f"the operator exited; last log lines:\n{op.tail()}")

    def apply_tenants(self, manifests: Sequence[Path]) -> list[dict[str, Any]]:
        """Apply the tenants' manifests as a platform team would; return the services."""
        with self.timings.phase("tenants", self.console,
                                "Applied the tenants' SLOPolicies and InferenceServices"):
            services = []
            for path in manifests:
                self.cluster.kubectl("apply", "-f", str(path))
                for doc in yaml.safe_load_all(path.read_text()):
                    if doc and doc.get("kind") == "InferenceService":
                        services.append(doc)
        return services

    def wait_first_replicas(self, harness: ReplicaHarness, services: Sequence[Mapping[str, Any]],
                            timeout: float = 180.0) -> None:
        """Wait until every service has a ready replica model (the operator created its
        Deployment, the scheduler placed the pods on matching GPU nodes, kwok ran them and
        the model finished its cold start)."""
        keys = [((s.get("metadata") or {}).get("namespace", ""),
                 (s.get("metadata") or {}).get("name", "")) for s in services]

        def ready() -> bool:
            self.check_operator()
            return all(harness.endpoints(ns, name) for ns, name in keys)

        with self.timings.phase("first_replicas", self.console,
                                "First replica of every service ready"):
            wait_for(ready, timeout=timeout, interval=0.2, max_interval=1.0,
                     desc="a ready replica of every service")

    # ----- reading state ----------------------------------------------------------------

    def list_objects(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """All InferenceServices, and SLOPolicies keyed by namespace/name."""
        api = kubernetes.client.CustomObjectsApi(self.cluster.api)
        svcs = cast(dict[str, Any], api.list_cluster_custom_object(
            GROUP, VERSION, "inferenceservices"))
        pols = cast(dict[str, Any], api.list_cluster_custom_object(GROUP, VERSION, "slopolicies"))
        return list(svcs["items"]), {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pols["items"]
        }

def policy_of(svc: Mapping[str, Any], policies: Mapping[str, dict[str, Any]]
              ) -> dict[str, Any] | None:
    """The SLOPolicy object a service refers to (same namespace), if it exists."""
    ref = ((svc.get("spec") or {}).get("sloPolicyRef") or {}).get("name")
    ns = (svc.get("metadata") or {}).get("namespace", "")
    return policies.get(f"{ns}/{ref}") if ref else None

