"""A real, local Kubernetes control plane for tests: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler and kwok (fake GPU nodes), all on 127.0.0.1.

Binaries come from ``hack/build-binaries.sh`` (paths in ``$SLO_BIN_CACHE/slo-bin.env``; each
can be overridden with the same-named environment variable, e.g. ``SLO_KUBE_APISERVER``).

Dev use::

    python -m slo_devtools.devenv.control_plane up   # prints `export KUBECONFIG=...`; Ctrl-C

Test use::

    with LocalCluster() as c:
        c.kubectl("apply", "-f", "crds/")
        c.wait_for(lambda: ..., timeout=60, desc="...")
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import datetime as dt
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import click
import kubernetes.client
import kubernetes.config
from kubernetes.client.exceptions import ApiException

from slo_devtools.devenv.gpu_nodes import NodeGroup, default_fleet, fleet_manifests
from slo_devtools.devenv.pki import (
    CertificateAuthority,
    CertPair,
    write_kubeconfig,
    write_signing_key,
)

T = TypeVar("T")

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
# Relative to where the tests or the demo run (the repository root in CI); _out/ is ignored.
LOGS_ROOT = Path("_out") / "cluster-logs"

# Probes see these while a component is still coming up; anything else is a real error.
PROBE_ERRORS: tuple[type[BaseException], ...] = (OSError, urllib.error.URLError, ssl.SSLError)


class ClusterError(RuntimeError):
    pass


def bin_cache() -> Path:
    return Path(os.environ.get("SLO_BIN_CACHE", Path.home() / ".cache/slo-operator/bin"))


@dataclass(frozen=True)
class Binaries:
    etcd: Path | None
    kube_apiserver: Path | None
    kube_controller_manager: Path | None
    kube_scheduler: Path | None
    kwok: Path | None
    kwok_stages: Path | None
    kubectl: Path | None
    helm: Path | None
    kube_version: str | None
    # Prometheus 3.x built by hack/build-binaries.sh; Debian's 2.42 package is the fallback.
    prometheus: Path | None = None
    promtool: Path | None = None
    prometheus_version: str | None = None

    REQUIRED = ("etcd", "kube_apiserver", "kube_controller_manager", "kube_scheduler", "kwok")

    @classmethod
    def discover(cls) -> Binaries:
        """Env vars win over the env file written by hack/build-binaries.sh."""
        values: dict[str, str] = {}
        env_file = bin_cache() / "slo-bin.env"
        if env_file.is_file():
            for line in env_file.read_text().splitlines():
                key, sep, value = line.partition("=")
                if sep:
                    values[key.strip()] = value.strip()
        for key, value in os.environ.items():
            if key.startswith("SLO_"):
                values[key] = value

        def path(key: str) -> Path | None:
            v = values.get(key)
            return Path(v) if v else None

        kubectl = path("SLO_KUBECTL")
        if kubectl is None and (found := shutil.which("kubectl")):
            kubectl = Path(found)
        return cls(
            etcd=path("SLO_ETCD"),
            kube_apiserver=path("SLO_KUBE_APISERVER"),
            kube_controller_manager=path("SLO_KUBE_CONTROLLER_MANAGER"),
            kube_scheduler=path("SLO_KUBE_SCHEDULER"),
            kwok=path("SLO_KWOK"),
            kwok_stages=path("SLO_KWOK_STAGES"),
            kubectl=kubectl,
            helm=path("SLO_HELM"),
            kube_version=values.get("SLO_KUBE_VERSION"),
            prometheus=path("SLO_PROMETHEUS") or _which("prometheus"),
            promtool=path("SLO_PROMTOOL") or _which("promtool"),
            prometheus_version=values.get("SLO_PROMETHEUS_VERSION"),
        )

    def missing(self) -> list[str]:
        out = []
        for name in self.REQUIRED:
            p = getattr(self, name)
            if p is None or not os.access(p, os.X_OK):
                out.append(name.replace("_", "-"))
        if self.kwok_stages is None or not self.kwok_stages.is_dir():
            out.append("kwok stages")
        return out


def _which(name: str) -> Path | None:
    found = shutil.which(name)
    return Path(found) if found else None


# Where listening ports are picked: below the kernel's ephemeral range. A port the kernel
# hands out for ``bind(port 0)`` comes from that range, the one outgoing connections take
# their local ports from too, so between picking it and the server binding it an
# apiserver client or a scrape could take it ("address already in use"). Below the range
# only listeners compete, and the ones this process picked are not handed out twice.
PORT_SPAN = 12_000
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_picked: set[int] = set()
_picked_lock = threading.Lock()


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's ephemeral port range (Linux's default where it cannot be read)."""
    try:
        low, high = (int(x) for x in path.read_text().split()[:2])
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def free_port(path: Path = EPHEMERAL_RANGE_FILE) -> int:
    """A TCP port on 127.0.0.1 free now, below the ephemeral range where the range leaves
    room (else the kernel's pick), never one this process handed out before."""
    low = ephemeral_range(path)[0]
    first = max(1024, low - PORT_SPAN)
    with _picked_lock:
        for _ in range(200 if low - first >= 1000 else 0):
            port = random.randrange(first, low)
            if port in _picked:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _picked.add(port)
            return port
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
            if port not in _picked:
                _picked.add(port)
                return port


def wait_for(
    predicate: Callable[[], T],
    *,
    timeout: float = 60.0,
    interval: float = 0.1,
    max_interval: float = 1.0,
    desc: str = "condition",
    ignore: tuple[type[BaseException], ...] = (),
) -> T:
    """Poll ``predicate`` until it returns a truthy value and return that value.

    Exceptions listed in ``ignore`` count as "not yet"; the last one is reported on timeout.
    The poll interval backs off from ``interval`` to ``max_interval``.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
        except ignore as e:
            last = e
        else:
            if value:
                return value
            last = value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {desc} (last: {last!r})")
        time.sleep(interval)
        interval = min(interval * 1.5, max_interval)


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child before exec: if the test process is killed outright, the kernel sends
    # SIGKILL to the component instead of leaving it orphaned.
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Component:
    name: str
    cmd: list[str]
    log: Path
    popen: subprocess.Popen[bytes] | None = None
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    def start(self, cwd: Path, env: dict[str, str] | None = None) -> None:
        self._log_file = self.log.open("ab")
        self._log_file.write(("$ " + " ".join(self.cmd) + "\n").encode())
        self._log_file.flush()
        self.popen = subprocess.Popen(
            self.cmd,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def check_alive(self) -> None:
        if self.popen is not None and self.popen.poll() is not None:
            raise ClusterError(
                f"{self.name} exited with code {self.popen.returncode}; "
                f"last log lines:\n{self.tail()}"
            )

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM the component's process group, SIGKILL it if it outlives ``timeout``."""
        p = self.popen
        if p is not None and p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None


class LocalCluster:
    """The control plane plus fake GPU nodes, in a temporary directory."""

    def __init__(
        self,
        *,
        fleet: Sequence[NodeGroup] | None = None,
        binaries: Binaries | None = None,
        workdir: Path | None = None,
        node_prefix: str = "kwok",
        kwok_taint: bool = False,
        start_timeout: float = 120.0,
    ) -> None:
        self.fleet = list(default_fleet() if fleet is None else fleet)
        self.binaries = binaries or Binaries.discover()
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="slo-cluster-"))
        self.node_prefix = node_prefix
        self.kwok_taint = kwok_taint
        self.start_timeout = start_timeout
        self.logs_dir = self.workdir / "logs"
        self.pki_dir = self.workdir / "pki"
        self.components: list[Component] = []
        self.extra: list[Component] = []
        self.ports: dict[str, int] = {}
        self.node_names: list[str] = []
        self._api: kubernetes.client.ApiClient | None = None
        self._lock = threading.Lock()
        self._stopped = False

    # ----- public API -----------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def ca_cert(self) -> Path:
        return self.pki_dir / "ca.crt"

    def start(self) -> LocalCluster:
        missing = self.binaries.missing()
        if missing:
            raise ClusterError(
                f"control-plane binaries not built: {', '.join(missing)}; "
                "run `bash hack/build-binaries.sh`"
            )
        atexit.register(self.stop)
        try:
            self._start()
        except BaseException as e:
            dest = self.save_logs(f"startup-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}")
            self.stop()
            if isinstance(e, Exception):
                raise ClusterError(f"cluster failed to start: {e} (logs: {dest})") from e
            raise
        return self

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        if self._api is not None:
            self._api.close()  # type: ignore[no-untyped-call]
            self._api = None
        # Helpers (an operator) go first, while the API server they talk to is still up.
        for c in [*reversed(self.extra), *reversed(self.components)]:
            c.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        atexit.unregister(self.stop)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is not None:
            dest = self.save_logs(f"failure-{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}")
            print(f"control-plane logs copied to {dest}", file=sys.stderr)
        self.stop()

    def save_logs(self, name: str, root: Path = LOGS_ROOT) -> Path:
        """Copy every component's log (as of now) to ``root/name`` and return that folder."""
        dest = root / "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
        dest.mkdir(parents=True, exist_ok=True)
        if self.logs_dir.is_dir():
            for log in self.logs_dir.iterdir():
                shutil.copy2(log, dest / log.name)
        return dest

    def api_client(self) -> kubernetes.client.ApiClient:
        """A new admin ApiClient (caller closes it)."""
        client: kubernetes.client.ApiClient = kubernetes.config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )
        return client

    @property
    def api(self) -> kubernetes.client.ApiClient:
        """A shared admin ApiClient owned by the cluster."""
        if self._api is None:
            self._api = self.api_client()
        return self._api

    @property
    def core(self) -> kubernetes.client.CoreV1Api:
        return kubernetes.client.CoreV1Api(self.api)

    @property
    def apps(self) -> kubernetes.client.AppsV1Api:
        return kubernetes.client.AppsV1Api(self.api)

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        kubeconfig: Path | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this cluster (admin unless ``kubeconfig`` is given)."""
        if self.binaries.kubectl is None:
            raise ClusterError("kubectl not found; run `bash hack/build-binaries.sh`")
        cmd = [str(self.binaries.kubectl), "--kubeconfig", str(kubeconfig or self.kubeconfig)]
        proc = subprocess.run(
            [*cmd, *args], input=input, capture_output=True, text=True, timeout=timeout
        )
        if check and proc.returncode != 0:
            raise ClusterError(
                f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr.strip()}"
            )
        return proc

    def kubectl_json(self, *args: str, kubeconfig: Path | None = None) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json", kubeconfig=kubeconfig).stdout)

    def helm(
        self, *args: str, check: bool = True, timeout: float = 300.0
    ) -> subprocess.CompletedProcess[str]:
        if self.binaries.helm is None:
            raise ClusterError("helm not built; run `bash hack/build-binaries.sh`")
        proc = subprocess.run(
            [str(self.binaries.helm), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise ClusterError(f"helm {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def wait_for(
        self,
        predicate: Callable[[], T],
        *,
        timeout: float = 60.0,
        desc: str = "condition",
        ignore: tuple[type[BaseException], ...] = (),
    ) -> T:
        """:func:`wait_for` that also fails fast when a control-plane component has died."""

        def checked() -> T:
            for c in self.components:
                c.check_alive()
            return predicate()

        return wait_for(checked, timeout=timeout, desc=desc, ignore=ignore)

    def create_namespace(
        self, name: str | None = None, labels: dict[str, str] | None = None
    ) -> str:
        name = name or f"t-{uuid.uuid4().hex[:8]}"
        meta = kubernetes.client.V1ObjectMeta(name=name, labels=labels or {})
        self.core.create_namespace(kubernetes.client.V1Namespace(metadata=meta))
        return name

    def sa_kubeconfig(
        self,
        namespace: str,
        name: str,
        *,
        create: bool = True,
        expiration_seconds: int = 3600,
        path: Path | None = None,
    ) -> Path:
        """A kubeconfig that authenticates as ServiceAccount ``namespace/name`` with a token
        from the TokenRequest API, i.e. with exactly the RBAC that account is bound to."""
        core = self.core
        if create:
            try:
                core.create_namespaced_service_account(
                    namespace,
                    kubernetes.client.V1ServiceAccount(
                        metadata=kubernetes.client.V1ObjectMeta(name=name)
                    ),
                )
            except ApiException as e:
                if e.status != 409:
                    raise
        request = kubernetes.client.AuthenticationV1TokenRequest(
            spec=kubernetes.client.V1TokenRequestSpec(
                audiences=[], expiration_seconds=expiration_seconds
            )
        )
        status = core.create_namespaced_service_account_token(name, namespace, request).status
        if status is None or not status.token:
            raise ClusterError(f"TokenRequest for {namespace}/{name} returned no token")
        out = path or self.workdir / f"sa-{namespace}-{name}.kubeconfig"
        return write_kubeconfig(
            out,
            server=self.server,
            ca=self.ca_cert,
            user=f"system:serviceaccount:{namespace}:{name}",
            token=status.token,
            namespace=namespace,
        )

    def add_nodes(self, fleet: Iterable[NodeGroup], *, prefix: str | None = None) -> list[str]:
        """Create more fake nodes and wait until kwok reports them Ready."""
        manifests = fleet_manifests(fleet, prefix=prefix or self.node_prefix, taint=self.kwok_taint)
        for m in manifests:
            try:
                self.core.create_node(kubernetes.client.V1Node.model_validate(m))
            except ApiException as e:
                # A reused --workdir keeps etcd, and with it the nodes of the last run.
                if e.status != 409:
                    raise
        names = [m["metadata"]["name"] for m in manifests]
        self.wait_nodes_ready(names)
        self.node_names += names
        return names

    def wait_nodes_ready(self, names: Sequence[str], timeout: float = 60.0) -> None:
        wanted = set(names)

        def ready() -> bool:
            nodes = self.core.list_node().items
            ok = {
                n.metadata.name
                for n in nodes
                if n.metadata is not None
                and n.status is not None
                and any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
            }
            return wanted <= ok

        self.wait_for(ready, timeout=timeout, desc=f"nodes Ready: {sorted(wanted)}")

    def spawn(
        self,
        name: str,
        cmd: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> Component:
        """Start a helper process (an operator, Prometheus...) whose log lands in ``logs_dir``
        (so it is saved with the control-plane logs) and which is stopped with the cluster.
        Unlike control-plane components, its exit does not fail :meth:`wait_for`."""
        c = Component(name=name, cmd=list(cmd), log=self.logs_dir / f"{name}.log")
        c.start(cwd or Path.cwd(), env=env)
        self.extra.append(c)
        return c

    def version(self) -> dict[str, Any]:
        return dict(self._get_json(f"{self.server}/version"))

    # ----- startup ----------------------------------------------------------------------

    def _start(self) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        for name in ("etcd_client", "etcd_peer", "apiserver", "kcm", "scheduler", "kwok"):
            self.ports[name] = free_port()
        self._write_pki()
        deadline = time.monotonic() + self.start_timeout

        def left() -> float:
            return max(1.0, deadline - time.monotonic())

        etcd = self._spawn("etcd", self._etcd_cmd())
        self._wait_component(
            etcd,
            lambda: (
                self._get_json(f"http://127.0.0.1:{self.ports['etcd_client']}/health").get("health")
                == "true"
            ),
            left(),
        )
        apiserver = self._spawn("kube-apiserver", self._apiserver_cmd())
        self._wait_component(
            apiserver, lambda: self._get_text(f"{self.server}/readyz") == "ok", left()
        )
        kcm = self._spawn("kube-controller-manager", self._kcm_cmd())
        sched = self._spawn("kube-scheduler", self._scheduler_cmd())
        kwok = self._spawn("kwok", self._kwok_cmd())
        self._wait_component(
            kcm,
            lambda: (
                self._get_text(f"https://127.0.0.1:{self.ports['kcm']}/healthz", tls=False) == "ok"
            ),
            left(),
        )
        self._wait_component(
            sched,
            lambda: (
                self._get_text(f"https://127.0.0.1:{self.ports['scheduler']}/healthz", tls=False)
                == "ok"
            ),
            left(),
        )
        self._wait_component(
            kwok,
            lambda: self._get_text(f"http://127.0.0.1:{self.ports['kwok']}/healthz") == "ok",
            left(),
        )
        # The service-account controller creating `default` proves the controllers run with
        # their own credentials; pods cannot be admitted before it exists.
        self.wait_for(
            lambda: self._exists(
                lambda: self.core.read_namespaced_service_account("default", "default")
            ),
            timeout=left(),
            desc="ServiceAccount default/default",
        )
        self.node_names = []
        self.add_nodes(self.fleet)

    def _spawn(self, name: str, cmd: list[str]) -> Component:
        c = Component(name=name, cmd=cmd, log=self.logs_dir / f"{name}.log")
        c.start(self.workdir)
        self.components.append(c)
        return c

    def _wait_component(self, c: Component, probe: Callable[[], bool], timeout: float) -> None:
        def ready() -> bool:
            c.check_alive()
            return probe()

        wait_for(ready, timeout=timeout, desc=f"{c.name} ready", ignore=PROBE_ERRORS)

    @staticmethod
    def _exists(read: Callable[[], object]) -> bool:
        try:
            read()
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        return True

    def _ssl(self, tls: bool) -> ssl.SSLContext:
        if not tls:
            # Component health endpoints serve self-signed certificates they generate.
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            return ctx
        ctx = ssl.create_default_context(cafile=str(self.ca_cert))
        admin = self.pki_dir
        ctx.load_cert_chain(str(admin / "admin.crt"), str(admin / "admin.key"))
        return ctx

    def _get_text(self, url: str, tls: bool = True) -> str:
        ctx = self._ssl(tls) if url.startswith("https") else None
        try:
            with urllib.request.urlopen(url, timeout=5, context=ctx) as r:
                return str(r.read().decode())
        except urllib.error.HTTPError as e:
            # Not ready yet (e.g. readyz 500 while post-start hooks run).
            return f"HTTP {e.code}"

    def _get_json(self, url: str) -> dict[str, Any]:
        text = self._get_text(url)
        return dict(json.loads(text)) if text.startswith("{") else {}

    def _write_pki(self) -> None:
        now = dt.datetime.now(dt.UTC)
        ca = CertificateAuthority(self.pki_dir, validity=dt.timedelta(days=30), now=now)
        self._serving = ca.serving(
            "kube-apiserver",
            dns=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ips=["127.0.0.1", SERVICE_IP],
        )
        self._sa_key = write_signing_key(self.pki_dir)
        self._front_proxy = ca.client("front-proxy-client", user="front-proxy-client")
        clients: dict[str, CertPair] = {
            "admin": ca.client("admin", user="kubernetes-admin", groups=("system:masters",)),
            "kcm": ca.client("kcm", user="system:kube-controller-manager"),
            "scheduler": ca.client("scheduler", user="system:kube-scheduler"),
            # kwok writes node and pod status and leases for every fake node: an admin job.
            "kwok": ca.client("kwok", user="kwok-controller", groups=("system:masters",)),
            "apiserver-kubelet-client": ca.client(
                "apiserver-kubelet-client",
                user="kube-apiserver-kubelet-client",
                groups=("system:masters",),
            ),
        }
        self._clients = clients
        for name, pair in clients.items():
            if name == "apiserver-kubelet-client":
                continue
            file = self.kubeconfig if name == "admin" else self.workdir / f"{name}.kubeconfig"
            write_kubeconfig(
                file,
                server=f"https://127.0.0.1:{self.ports['apiserver']}",
                ca=ca.pair.cert,
                user=name,
                client=pair,
            )
        self._ca = ca.pair

    def _etcd_cmd(self) -> list[str]:
        client = f"http://127.0.0.1:{self.ports['etcd_client']}"
        peer = f"http://127.0.0.1:{self.ports['etcd_peer']}"
        return [
            str(self.binaries.etcd),
            "--name=etcd0",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=etcd0={peer}",
            # Throw-away data: skipping fsync keeps the 2-core test machine responsive.
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_cmd(self) -> list[str]:
        return [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{self.ports['etcd_client']}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['apiserver']}",
            "--advertise-address=127.0.0.1",
            # The kubernetes Service's endpoints would have to be 127.0.0.1, which Endpoints
            # validation rejects; nothing in the fake pods calls the API through it.
            "--endpoint-reconciler-type=none",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={self._serving.cert}",
            f"--tls-private-key-file={self._serving.key}",
            f"--client-ca-file={self._ca.cert}",
            f"--kubelet-client-certificate={self._clients['apiserver-kubelet-client'].cert}",
            f"--kubelet-client-key={self._clients['apiserver-kubelet-client'].key}",
            f"--requestheader-client-ca-file={self._ca.cert}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self._front_proxy.cert}",
            f"--proxy-client-key-file={self._front_proxy.key}",
            "--authorization-mode=Node,RBAC",
            # Defaults already include ServiceAccount; listed so that a change of defaults
            # cannot silently drop the admission the operator's tests rely on.
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,NodeRestriction",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={self._sa_key.cert}",
            f"--service-account-signing-key-file={self._sa_key.key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--profiling=false",
            "--v=1",
        ]

    def _kcm_cmd(self) -> list[str]:
        kc = self.workdir / "kcm.kubeconfig"
        return [
            str(self.binaries.kube_controller_manager),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['kcm']}",
            f"--cert-dir={self.workdir / 'kcm-certs'}",
            # In-tree cloud controllers are gone from kube-controller-manager since 1.31.
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self._sa_key.key}",
            f"--root-ca-file={self._ca.cert}",
            f"--cluster-signing-cert-file={self._ca.cert}",
            f"--cluster-signing-key-file={self.pki_dir / 'ca.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--leader-elect=false",
            "--v=1",
        ]

    def _scheduler_cmd(self) -> list[str]:
        kc = self.workdir / "scheduler.kubeconfig"
        return [
            str(self.binaries.kube_scheduler),
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports['scheduler']}",
            f"--cert-dir={self.workdir / 'scheduler-certs'}",
            "--leader-elect=false",
            "--v=1",
        ]

    def _kwok_cmd(self) -> list[str]:
        assert self.binaries.kwok_stages is not None
        config = self.workdir / "kwok.yaml"
        stages = sorted(self.binaries.kwok_stages.glob("*.yaml"))
        config.write_text("\n---\n".join(s.read_text() for s in stages))
        return [
            str(self.binaries.kwok),
            f"--kubeconfig={self.workdir / 'kwok.kubeconfig'}",
            f"--config={config}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            f"--cidr={POD_CIDR}",
            "--node-ip=10.244.0.1",
            "--node-lease-duration-seconds=40",
            f"--server-address=127.0.0.1:{self.ports['kwok']}",
        ]


# ----- dev command ------------------------------------------------------------------------


@click.group()
def cli() -> None:
    """Local Kubernetes control plane with fake GPU nodes."""


@cli.command()
@click.option("--workdir", type=click.Path(path_type=Path), help="Keep state here (default: temp).")
def up(workdir: Path | None) -> None:
    """Start the cluster, print `export KUBECONFIG=...`, and run until Ctrl-C."""
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    cluster = LocalCluster(workdir=workdir)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    cluster.start()
    try:
        v = cluster.version()
        click.echo(
            f"# Kubernetes {v.get('gitVersion')} up in {time.monotonic() - t0:.1f}s; "
            f"nodes: {', '.join(cluster.node_names)}",
            err=True,
        )
        click.echo(f"# logs: {cluster.logs_dir}", err=True)
        click.echo(f"export KUBECONFIG={cluster.kubeconfig}")
        sys.stdout.flush()
        while not stop.is_set():
            for c in cluster.components:
                c.check_alive()
            stop.wait(1.0)
    finally:
        cluster.stop()


if __name__ == "__main__":
    cli()
