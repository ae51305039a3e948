"""One actor, always, on the real control plane: two `slo-operator run --peering` processes.

The issue "Trust under faults": the acting replica is stopped (SIGSTOP, a stalled
keep-alive), so the standby resumes; after SIGCONT the older replica, of higher priority,
takes over and kopf pauses the other one. Its periodic loop must then run no pass and make
no write (counted from each process's /metrics and from the API server's
``apiserver_request_total``). And when the acting replica dies (SIGKILL), the standby's
first pass comes within the peering lifetime and a margin (docs/reliability.md).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from slo_devtools.devenv.control_plane import LocalCluster, free_port, wait_for
from slo_operator.api.models import GROUP
from tests.integration.operator_support import CHART, ROOT, conditions, install_crds
from tests.integration.test_api_requests import WRITES, request_counts

pytestmark = pytest.mark.integration

LIFETIME = 5  # seconds without a keep-alive before peers presume a replica dead
INTERVAL = 1  # seconds between periodic passes
# The standby's first pass after the active replica died: kopf resumes it once the dead
# peer's keep-alive is LIFETIME old, lists every kind before it calls a handler, and the
# loop passes at its next tick (a replica that acted before and was paused also waits
# handlers.periodic.settle_time, 2 s here). The rest is slack for 2 shared cores.
FAILOVER_MARGIN = 8.0
_SAMPLE = re.compile(r"^(slo_operator_\w+)(\{[^}]*\})? (\S+)$", re.M)


class Replica:
    """One `slo-operator run --peering` process with its /metrics and liveness ports."""

    def __init__(self, name: str, cluster: LocalCluster, peering: str, log_dir: Path) -> None:
        self.name = name
        self.health_port, self.metrics_port = free_port(), free_port()
        self.log_path = log_dir / f"operator-{name}.log"
        self._log = self.log_path.open("w")
        self.stopped = False
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLO_")}
        env |= {"KUBECONFIG": str(cluster.kubeconfig), "POD_ID": name}
        # SLO_TEST_OPERATOR_VERBOSE=1: kopf's debug log too (its peering patches).
        verbose = ["-v"] if os.environ.get("SLO_TEST_OPERATOR_VERBOSE") == "1" else []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slo_operator.cli", *verbose, "run",
             "--kubeconfig", str(cluster.kubeconfig), "--peering", peering,
             "--peering-lifetime", str(LIFETIME), "--interval", str(INTERVAL),
             "--metrics-port", str(self.metrics_port),
             "--liveness", f"http://127.0.0.1:{self.health_port}/healthz"],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def metrics(self) -> dict[str, float]:
        """``name{labels}`` -> value of every slo_operator_* sample; {} while unreachable."""
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited {self.proc.returncode}:\n{self.logs()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                        timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return {}
        return {f"{m[1]}{m[2] or ''}": float(m[3]) for m in _SAMPLE.finditer(text)}

    def passes(self, result: str = "ok") -> int:
        key = f'slo_operator_periodic_passes_total{{result="{result}"}}'
        return int(self.metrics().get(key, 0))

    def all_passes(self) -> dict[str, int]:
        return {r: self.passes(r) for r in ("ok", "error", "cancelled")}

    def writes(self, result: str = "sent") -> int:
        key = f'slo_operator_periodic_writes_total{{result="{result}"}}'
        return int(self.metrics().get(key, 0))

    def active(self) -> bool | None:
        value = self.metrics().get("slo_operator_peering_active")
        return None if value is None else value == 1.0

    def logs(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def send(self, sig: int) -> None:
        self.proc.send_signal(sig)
        self.stopped = sig == signal.SIGSTOP

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            if self.stopped:
                self.send(signal.SIGCONT)
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._log.closed:
            self._log.close()


def peers(cluster: LocalCluster, peering: str) -> set[str]:
    return set(cluster.kubectl_json("get", "clusterkopfpeering", peering).get("status") or {})


@pytest.fixture
def replicas(cluster: LocalCluster, namespace: str,
             tmp_path: Path) -> Iterator[tuple[Replica, Replica]]:
    """Replica a acting and replica b standing by, over one steady InferenceService."""
    install_crds(cluster)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f",
                    str(CHART / "crds" / "kopf.dev-peerings.yaml"))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/clusterkopfpeerings.kopf.dev")
    # One peering object per test: no keep-alive of an earlier test's replicas in it.
    peering = f"one-actor-{namespace}"
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering",
         "metadata": {"name": peering}}))
    docs = [{"apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
             "metadata": {"name": "gold"}, "spec": {"scaling": {"minReplicas": 1}}},
            {"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
             "metadata": {"name": "chat"},
             "spec": {"model": {"name": "org/chat", "sizeBillions": 8},
                      "hardware": {"gpuProducts": ["H100"]},
                      "sloPolicyRef": {"name": "gold"}}}]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(docs))
    made: list[Replica] = []
    try:
        a = Replica("a", cluster, peering, tmp_path)
        made.append(a)
        wait_for(lambda: a.active() is True and a.passes() >= 1, timeout=90,
                 desc="replica a acting and passing")
        b = Replica("b", cluster, peering, tmp_path)
        made.append(b)
        wait_for(lambda: peers(cluster, peering) >= {"a", "b"} and b.active() is False,
                 timeout=90, desc="replica b standing by in the peering object")

        def steady() -> bool:
            svc = cluster.kubectl_json("get", "infsvc", "-n", namespace, "chat")
            return conditions(svc).get("Ready", {}).get("status") == "True"

        cluster.wait_for(steady, timeout=120, desc="the service reconciled by replica a")
        yield a, b
    finally:
        for r in made:
            r.stop()
            print(f"\n--- replica {r.name} log ---\n{r.logs()[-3000:]}")
        cluster.kubectl("delete", "clusterkopfpeering", peering, check=False)


_PEERING_LINE = re.compile(r"^(\S+ \S+) INFO kopf\._core\.engines\.peering: "
                           r"(Pausing|Resuming) operations", re.M)


def paused_for(r: Replica) -> float:
    """Seconds since kopf last paused ``r`` (its last peering line); 0 while it acts."""
    lines = _PEERING_LINE.findall(r.logs())
    if not lines or lines[-1][1] != "Pausing":
        return 0.0
    at = datetime.strptime(lines[-1][0], "%Y-%m-%d %H:%M:%S,%f")
    return (datetime.now() - at).total_seconds()


def steady_passes(r: Replica, n: int) -> bool:
    """The last ``n`` passes in ``r``'s log applied or patched nothing."""
    counts = re.findall(r"Finished periodic pass \d+: (\d+) objects", r.logs())
    return len(counts) >= n and counts[-n:] == ["0"] * n


def test_a_replica_paused_for_its_elder_runs_no_pass_and_makes_no_write(
    cluster: LocalCluster, replicas: tuple[Replica, Replica], record_property: Any,
) -> None:
    a, b = replicas
    # A stalled keep-alive: a stops; b resumes once a's keep-alive is LIFETIME old.
    a.send(signal.SIGSTOP)
    stopped = time.monotonic()
    wait_for(lambda: b.active() is True, timeout=LIFETIME + 30, desc="b resumes")
    b_resumed = b.passes()
    wait_for(lambda: b.passes() >= b_resumed + 2, timeout=30, desc="b passing")
    record_property("b_passes_while_a_stopped", b.passes())

    # a continues: older, so of higher priority; kopf pauses b in a's favour.
    pauses = b.logs().count("Pausing operations")
    a.send(signal.SIGCONT)
    record_property("a_stopped_s", round(time.monotonic() - stopped, 1))
    wait_for(lambda: b.active() is False and b.logs().count("Pausing operations") > pauses,
             timeout=30, desc="kopf pauses b")
    # a knows it stalled past the lifetime: it skipped a pass to read fresh caches first.
    wait_for(lambda: "this process stalled" in a.logs(), timeout=30, desc="a saw its stall")
    # kopf may resume and re-pause b a few times while a catches up with its backlog
    # (docs/reliability.md); the window starts once b has stayed paused for a while.
    wait_for(lambda: paused_for(b) >= 3.0, timeout=60, desc="b steadily paused")
    wait_for(lambda: steady_passes(a, 2), timeout=60, desc="a's passes steady again")
    flaps = b.logs().count("Pausing operations") - pauses - 1
    record_property("kopf_repauses_of_b_after_sigcont", flaps)

    # The window: a acts (a pass a second), b is paused.
    b_before, b_writes, b_refused = b.all_passes(), b.writes(), b.writes("refused")
    a_before, requests_before = a.passes(), request_counts(cluster)
    start = time.monotonic()
    wait_for(lambda: a.passes() >= a_before + 8, timeout=60, desc="eight passes of a")
    window = time.monotonic() - start
    requests = {k: v - requests_before[k] for k, v in request_counts(cluster).items()
                if k[0] in WRITES and v != requests_before[k]}
    b_after = b.all_passes()
    record_property("window_s", round(window, 1))
    record_property("a_passes_in_window", a.passes() - a_before)
    record_property("b_passes_in_window", sum(b_after.values()) - sum(b_before.values()))
    print(f"\nwindow {window:.1f}s: a {a_before} -> {a.passes()} passes; b {b_before} -> "
          f"{b_after}; b writes {b_writes} -> {b.writes()} (refused {b_refused} -> "
          f"{b.writes('refused')}); API writes {requests}")
    assert "Paused periodic passes" in b.logs()
    assert b_after == b_before, "the paused replica ran periodic passes"
    assert b.writes() == b_writes, "the paused replica's periodic pass wrote"
    assert b.active() is False and a.active() is True
    # Nothing wrote to the operator's kinds: a's passes are steady and b is silent.
    assert requests == {}, f"writes while b was paused: {requests}"


def test_the_standby_passes_within_the_lifetime_after_the_active_replica_dies(
    replicas: tuple[Replica, Replica], record_property: Any,
) -> None:
    a, b = replicas
    before = b.passes()
    killed = time.monotonic()
    a.stop(signal.SIGKILL)
    wait_for(lambda: b.active() is True, timeout=LIFETIME + 30, max_interval=0.1,
             desc="b resumes")
    resumed = time.monotonic() - killed
    wait_for(lambda: b.passes() > before, timeout=LIFETIME + 30, max_interval=0.1,
             desc="b's first pass")
    failover = time.monotonic() - killed
    record_property("resumed_after_kill_s", round(resumed, 1))
    record_property("first_pass_after_kill_s", round(failover, 1))
    print(f"\nfailover: b resumed {resumed:.1f}s and passed {failover:.1f}s after SIGKILL "
          f"(lifetime {LIFETIME}s)")
    assert failover <= LIFETIME + FAILOVER_MARGIN, failover
    assert b.active() is True and b.all_passes()["error"] == 0
