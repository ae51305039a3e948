"""The scale benchmark: N InferenceServices on the local dev cluster, what one cycle costs.

Per N (a fresh cluster each time): a real control plane with fake H100 nodes large enough
for N one-GPU replicas, a real Prometheus scraping one synthetic exporter
(:mod:`slo_devtools.scale.synthetic`) that serves vLLM series for every pod, the operator as
a subprocess (``python -m slo_operator.cli run``, admin kubeconfig, ``--metrics-port``).
N services are created across up to 50 namespaces; each namespace holds one SLOPolicy, one
of 20 distinct policies (``p-0`` .. ``p-19``, two windows). Then it measures:

* cold start: seconds from the apply until every InferenceService has
  ``status.observedGeneration == metadata.generation`` and a Ready and a Progressing condition;
* at steady state (after settling passes), over ``passes`` periodic passes: pass duration
  (gaps between the operator's ``Finished periodic pass`` log lines, minus the interval),
  the operator's own histograms per pass (service reconcile time, PromQL round trips),
  PromQL queries per pass (the operator's query counter and Prometheus's
  ``prometheus_engine_query_duration_seconds_count{slice="inner_eval"}``), samples touched
  (``prometheus_engine_query_samples_total``), API requests per pass by verb and resource
  (``apiserver_request_total``, the operator's kinds, other components' status writes
  left out), operator CPU per pass and RSS (``/proc/<pid>``).

Nothing else talks to the API server or Prometheus during the counted passes.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from slo_devtools.devenv.control_plane import LocalCluster, free_port, wait_for
from slo_devtools.devenv.gpu_nodes import NodeGroup, h100_80gb
from slo_devtools.devenv.prometheus_server import PrometheusServer, Target
from slo_devtools.scale import synthetic
from slo_runtime.contract import GROUP, LABEL_SERVICE

ROOT = Path(__file__).resolve().parents[3]
MAX_NAMESPACES = 50
POLICIES = 20
GPUS_PER_NODE = 128
PODS_PER_NODE = 250
# What the operator reads or writes (as tests/integration/test_api_requests.py counts).
RESOURCES = {"inferenceservices", "slopolicies", "deployments", "services",
             "poddisruptionbudgets", "pods", "nodes", "events"}
OTHERS_STATUS = {"pods", "deployments", "nodes"}  # written by kwok / controller manager
WRITES = {"APPLY", "PATCH", "POST", "PUT", "DELETE", "CREATE", "UPDATE"}
STATUS_PATCH = ("PATCH", "inferenceservices", "status")
READS = {"GET", "LIST"}
_SAMPLE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_PASS = re.compile(r"^(\S+ \S+) INFO \S+: Finished periodic pass (\d+): (\d+) objects",
                   re.MULTILINE)


# --- pure parts ------------------------------------------------------------------------
Sample = tuple[str, dict[str, str], float]


def parse_metrics(text: str) -> list[Sample]:
    """(name, labels, value) of every sample of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m:
            try:
                value = float(m["value"])
            except ValueError:
                continue
            out.append((m["name"], dict(_LABEL.findall(m["labels"] or "")), value))
    return out


def total(samples: Iterable[Sample], name: str, **match: str) -> float:
    """Sum of the samples named ``name`` whose labels include ``match``."""
    return sum(v for n, labels, v in samples
               if n == name and all(labels.get(k) == want for k, want in match.items()))


STATUS_WRITES = "slo_operator_status_writes_total"
EVENTS_POSTED = "slo_operator_events_posted_total"


def label_values(samples: Iterable[Sample], name: str, label: str) -> set[str]:
    """The values of ``label`` among the samples named ``name``."""
    return {labels.get(label, "") for n, labels, _ in samples if n == name}


def request_counts(samples: Iterable[Sample]) -> Counter[tuple[str, str, str]]:
    """(verb, resource, subresource) -> requests served, for the operator's kinds."""
    out: Counter[tuple[str, str, str]] = Counter()
    for name, labels, value in samples:
        if name != "apiserver_request_total":
            continue
        verb, res, sub = labels.get("verb", ""), labels.get("resource", ""), labels.get(
            "subresource", "")
        if res not in RESOURCES or (sub == "status" and res in OTHERS_STATUS):
            continue
        if verb in WRITES or verb in READS:
            out[(verb, res, sub)] += int(value)
    return out


def pass_lines(log: str) -> list[tuple[float, int, int]]:
    """(unix time, pass number, writes) of every finished periodic pass in the log."""
    out = []
    for stamp, number, writes in _PASS.findall(log):
        t = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
        out.append((t, int(number), int(writes)))
    return out


def pass_durations(passes: Sequence[tuple[float, int, int]], interval: float) -> list[float]:
    """Duration of each pass: the gap between consecutive finishes minus the sleep."""
    return [max(0.0, b[0] - a[0] - interval) for a, b in itertools.pairwise(passes)]


def cpu_seconds(stat: str, ticks: int) -> float:
    """utime + stime of a ``/proc/<pid>/stat`` line, in seconds."""
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def rss_mb(status: str) -> float:
    """VmRSS of a ``/proc/<pid>/status`` text, in MB (10^6 bytes)."""
    m = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    return int(m.group(1)) * 1024 / 1e6 if m else float("nan")


def layout(n: int) -> list[tuple[str, str, str]]:
    """(namespace, service, policy) for N services over up to 50 namespaces; namespace j
    holds policy ``p-(j mod 20)``."""
    spaces = min(n, MAX_NAMESPACES)
    return [(f"scale-{i % spaces:02d}", f"s-{i:04d}", f"p-{(i % spaces) % POLICIES}")
            for i in range(n)]


def manifests(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(policies, services) for N services."""
    rows = layout(n)
    pols = {}
    for ns, _, pol in rows:
        k = int(pol[2:])
        pols[(ns, pol)] = {
            "apiVersion": f"{GROUP}/v1alpha1", "kind": "SLOPolicy",
            "metadata": {"name": pol, "namespace": ns},
            "spec": {"tenant": ns, "window": "60s" if k % 2 == 0 else "30s",
                     "priority": k % 5,
                     "scaling": {"minReplicas": 1, "maxReplicas": 2}}}
    svcs = [{"apiVersion": f"{GROUP}/v1alpha1", "kind": "InferenceService",
             "metadata": {"name": name, "namespace": ns},
             "spec": {"model": {"name": f"org/{name}", "sizeBillions": 8},
                      "hardware": {"gpuProducts": ["H100"]},
                      "sloPolicyRef": {"name": pol}}}
            for ns, name, pol in rows]
    return list(pols.values()), svcs


def fleet(n: int) -> list[NodeGroup]:
    """Fake H100 nodes with room for N one-GPU replicas at maxReplicas 2, plus one node."""
    node = dataclasses.replace(h100_80gb(GPUS_PER_NODE), pods=str(PODS_PER_NODE))
    return [NodeGroup(node, max(1, math.ceil(2 * n / min(GPUS_PER_NODE, PODS_PER_NODE))) + 1)]


def changed_paths(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted paths where two JSON values differ (lists compared whole)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out = []
        for k in sorted(set(a) | set(b)):
            out += changed_paths(a.get(k), b.get(k), f"{prefix}.{k}" if prefix else str(k))
        return out
    return [] if a == b else [prefix]


def reconciled(items: Iterable[Mapping[str, Any]]) -> int:
    """How many InferenceServices the operator has caught up with."""
    done = 0
    for svc in items:
        status = svc.get("status") or {}
        kinds = {c.get("type") for c in status.get("conditions") or []}
        if (status.get("observedGeneration") == svc["metadata"].get("generation")
                and {"Ready", "Progressing"} <= kinds):
            done += 1
    return done


@dataclass
class Result:
    """What one N measured."""

    n: int
    namespaces: int
    policies: int
    nodes: int
    interval: float
    workers: int
    reconciled_s: float | None = None
    passes: int = 0
    pass_s: list[float] = field(default_factory=list)
    service_reconcile_s_per_pass: float = 0.0
    query_s_per_pass: float = 0.0
    queries_per_pass: float = 0.0
    engine_queries_per_pass: float = 0.0
    samples_per_pass: float = 0.0
    series: int = 0
    requests_per_pass: dict[str, float] = field(default_factory=dict)
    # The operator's own count of status writes per pass, by what moved
    # (slo_operator_status_writes_total{reason}).
    status_writes_per_pass: dict[str, float] = field(default_factory=dict)
    # Events the operator itself posted per pass, by reason (slo_operator_events_posted_total;
    # the API server's POST events also counts other components').
    operator_events_per_pass: dict[str, float] = field(default_factory=dict)
    writes_per_pass: float = 0.0
    reads_per_pass: float = 0.0
    pass_writes_logged: list[int] = field(default_factory=list)
    settled: bool = False
    status_changes: list[str] = field(default_factory=list)
    cpu_s_per_pass: float = 0.0
    rss_mb: float = 0.0
    rss_mb_max: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def pass_mean_s(self) -> float:
        return sum(self.pass_s) / len(self.pass_s) if self.pass_s else float("nan")

    @property
    def pass_max_s(self) -> float:
        return max(self.pass_s) if self.pass_s else float("nan")

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["pass_mean_s"], d["pass_max_s"] = self.pass_mean_s, self.pass_max_s
        return d


COLUMNS = (
    ("N", lambda r: f"{r.n}"),
    ("cold start to all reconciled (s)", lambda r: "-" if r.reconciled_s is None
     else f"{r.reconciled_s:.0f}"),
    ("pass mean / max (s)", lambda r: f"{r.pass_mean_s:.2f} / {r.pass_max_s:.2f}"),
    ("service reconciles per pass (s)", lambda r: f"{r.service_reconcile_s_per_pass:.2f}"),
    ("PromQL time per pass (s)", lambda r: f"{r.query_s_per_pass:.2f}"),
    ("PromQL queries per pass (operator / Prometheus)",
     lambda r: f"{r.queries_per_pass:.1f} / {r.engine_queries_per_pass:.1f}"),
    ("samples touched per pass", lambda r: f"{r.samples_per_pass:,.0f}"),
    ("series in Prometheus", lambda r: f"{r.series:,}"),
    ("API reads / writes per pass", lambda r: f"{r.reads_per_pass:.1f} / {r.writes_per_pass:.1f}"),
    ("operator CPU per pass (s)", lambda r: f"{r.cpu_s_per_pass:.2f}"),
    ("operator RSS end / max (MB)", lambda r: f"{r.rss_mb:.0f} / {r.rss_mb_max:.0f}"),
)


def markdown(results: Sequence[Result]) -> str:
    head = "| " + " | ".join(c for c, _ in COLUMNS) + " |"
    sep = "|" + "---|" * len(COLUMNS)
    rows = ["| " + " | ".join(f(r) for _, f in COLUMNS) + " |" for r in results]
    lines = [head, sep, *rows, ""]
    for r in results:
        if r.requests_per_pass:
            lines.append(f"N={r.n} API requests per pass: " + ", ".join(
                f"{k} {v:.1f}" for k, v in sorted(r.requests_per_pass.items())))
        if r.status_writes_per_pass:
            lines.append(f"N={r.n} status writes per pass by what moved: " + ", ".join(
                f"{k} {v:.1f}" for k, v in sorted(r.status_writes_per_pass.items())))
        if r.operator_events_per_pass:
            lines.append(f"N={r.n} the operator's Events per pass: " + ", ".join(
                f"{k} {v:.1f}" for k, v in sorted(r.operator_events_per_pass.items())))
        if r.status_changes:
            lines.append(f"N={r.n} status of one service over the counted passes, changed: "
                         + ", ".join(r.status_changes))
        for note in r.notes:
            lines.append(f"N={r.n}: {note}")
    return "\n".join(lines) + "\n"


# --- the run -----------------------------------------------------------------------------
def _get(url: str, timeout: float = 30.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return str(r.read().decode())


class _Operator:
    def __init__(self, cluster: LocalCluster, prom_url: str, interval: float, workers: int,
                 log: Path) -> None:
        self.metrics_port, self.health_port = free_port(), free_port()
        self.log_path = log
        env = {**os.environ, "SLO_RECONCILE_INTERVAL": str(interval),
               "SLO_PROMETHEUS_URL": prom_url, "SLO_METRICS_PORT": str(self.metrics_port),
               "SLO_WORKERS": str(workers), "KUBECONFIG": str(cluster.kubeconfig)}
        self._log = open(log, "w")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slo_operator.cli", "run", "--kubeconfig",
             str(cluster.kubeconfig), "--liveness",
             f"http://127.0.0.1:{self.health_port}/healthz"],
            stdout=self._log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f"operator exited with {self.proc.returncode}: "
                               f"{self.log()[-3000:]}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text()

    def metrics(self) -> list[Sample]:
        return parse_metrics(_get(f"http://127.0.0.1:{self.metrics_port}/metrics"))

    def cpu(self) -> float:
        return cpu_seconds(Path(f"/proc/{self.proc.pid}/stat").read_text(),
                           os.sysconf("SC_CLK_TCK"))

    def rss(self) -> float:
        return rss_mb(Path(f"/proc/{self.proc.pid}/status").read_text())

    def passes(self) -> list[tuple[float, int, int]]:
        return pass_lines(self.log())

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


def _say(msg: str) -> None:
    print(f"[scale {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _spec(cluster: LocalCluster, rows: Sequence[tuple[str, str, str]]) -> list[
        synthetic.ServiceSeries]:
    """Every service with the pods that exist for it now."""
    pods: dict[tuple[str, str], list[str]] = {}
    for p in cluster.core.list_pod_for_all_namespaces(label_selector=LABEL_SERVICE).items:
        key = (p.metadata.namespace, p.metadata.labels.get(LABEL_SERVICE, ""))
        pods.setdefault(key, []).append(p.metadata.name)
    return [synthetic.ServiceSeries(ns, name, ns, tuple(sorted(pods.get((ns, name), ()))))
            for ns, name, _ in rows]


def run_one(n: int, *, interval: float, workers: int, passes: int, out: Path,
            cold_timeout: float = 900.0, settle_timeout: float | None = None) -> Result:
    pols, svcs = manifests(n)
    rows = layout(n)
    groups = fleet(n)
    res = Result(n=n, namespaces=len({r[0] for r in rows}), policies=len(pols),
                 nodes=sum(g.count for g in groups), interval=interval, workers=workers)
    work = out.resolve() / f"n{n}"
    work.mkdir(parents=True, exist_ok=True)
    _say(f"N={n}: starting a cluster with {res.nodes} fake nodes")
    cluster = LocalCluster(fleet=groups, workdir=work / "cluster", start_timeout=300).start()
    prom = exporter = op = None
    try:
        cluster.kubectl("apply", "--server-side", "-f", str(ROOT / "crds"))
        for crd in ("inferenceservices", "slopolicies"):
            cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                            f"crd/{crd}.{GROUP}")
        spec_file = work / "series.json"
        synthetic.write_spec(spec_file, [])
        port = free_port()
        exporter = cluster.spawn("synthetic-series", [
            sys.executable, "-m", "slo_devtools.scale.synthetic", "--spec", str(spec_file),
            "--port", str(port)])
        scrape = "5s" if n > 100 else "2s"
        prom = PrometheusServer(work / "prometheus", scrape_interval=scrape).start()
        prom.set_targets([Target(f"127.0.0.1:{port}")])
        prom.wait_target_up(timeout=60)
        for ns in sorted({r[0] for r in rows}):
            cluster.kubectl("create", "namespace", ns)
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(pols))
        op = _Operator(cluster, prom.url, interval, workers, work / "operator.log")
        wait_for(lambda: op is not None and bool(op.passes() or op.alive()), timeout=120,
                 interval=1.0, desc="the operator's first periodic pass")
        _say(f"N={n}: operator up; creating {n} InferenceServices in {res.namespaces} "
             f"namespaces ({res.policies} policy objects)")
        manifest = work / "services.yaml"
        manifest.write_text(yaml.safe_dump_all(svcs))
        start = time.monotonic()
        from kubernetes.client import CustomObjectsApi

        custom = CustomObjectsApi(cluster.api)

        def create(obj: dict[str, Any]) -> None:
            custom.create_namespaced_custom_object(
                GROUP, "v1alpha1", obj["metadata"]["namespace"], "inferenceservices", obj)

        # One POST per service from a few threads (kubectl apply of 1,000 objects on a busy
        # 2-core API server outlasts any sensible timeout).
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(create, svcs))
        _say(f"N={n}: created in {time.monotonic() - start:.0f}s")
        rss_max, last_spec, last_say = 0.0, 0.0, 0.0
        while True:
            op.alive()
            rss_max = max(rss_max, op.rss())
            items = custom.list_cluster_custom_object(GROUP, "v1alpha1",
                                                      "inferenceservices")["items"]
            done = reconciled(items)
            now = time.monotonic()
            if now - last_spec > 10:
                synthetic.write_spec(spec_file, _spec(cluster, rows))
                last_spec = now
            if now - last_say > 15:
                _say(f"N={n}: {done}/{n} reconciled after {now - start:.0f}s")
                last_say = now
            if done == n:
                res.reconciled_s = now - start
                break
            if now - start > cold_timeout:
                res.notes.append(f"only {done}/{n} reconciled after {cold_timeout:.0f}s")
                break
            time.sleep(2.0)
        _say(f"N={n}: all reconciled in {res.reconciled_s}s; waiting for pods' series")
        # Every pod's series in the exporter, then settle.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            spec = _spec(cluster, rows)
            synthetic.write_spec(spec_file, spec)
            if all(s.pods for s in spec):
                break
            time.sleep(5)
        res.series = sum(len(s.pods) for s in spec) * synthetic.series_per_pod()
        # Long enough for three passes, however long a pass takes at this N.
        gaps = pass_durations(op.passes()[-3:], interval)
        settle = settle_timeout if settle_timeout is not None else max(
            180.0, 12 * interval, 4 * (max(gaps, default=0.0) + interval))
        t_settle = time.monotonic()
        res.settled = False
        # Quiet: three passes in a row that applied or patched nothing (the pass's own
        # log line) and left the API server's status-patch counter where it was. The
        # new series' rates still move until they are a policy window old.
        patched: list[tuple[int, int, float]] = []  # (pass, logged writes, status patches)
        while time.monotonic() - t_settle < settle:
            op.alive()
            rss_max = max(rss_max, op.rss())
            seen = op.passes()
            if seen and (not patched or seen[-1][1] > patched[-1][0]):
                counts = request_counts(parse_metrics(
                    cluster.kubectl("get", "--raw", "/metrics").stdout))
                patched.append((seen[-1][1], seen[-1][2], counts[STATUS_PATCH]))
            tail = patched[-4:]
            if len(tail) == 4 and all(w == 0 for _, w, _ in tail[1:]) and len(
                    {c for *_, c in tail}) == 1:
                res.settled = True
                break
            time.sleep(1.0)
        if not res.settled:
            res.notes.append(f"no three write-free passes within {settle:.0f}s of settling")
        _say(f"N={n}: {'settled' if res.settled else 'not settled'}; counting {passes} passes")
        ns0, name0, _ = rows[0]
        status0 = custom.get_namespaced_custom_object(
            GROUP, "v1alpha1", ns0, "inferenceservices", name0).get("status") or {}
        # Count from a pass boundary: the counters are read right after a pass ends, the
        # operator's and Prometheus's first, before the next pass sends its queries (one
        # interval later); reading them later missed that pass's queries when passes are
        # long (the pass count still included it).
        last = op.passes()[-1][1] if op.passes() else 0
        wait_for(lambda: bool(op.passes()) and op.passes()[-1][1] > last,
                 timeout=600, interval=0.2, desc="a pass boundary")
        first = op.passes()[-1][1]
        op0, cpu0 = op.metrics(), op.cpu()
        prom0 = parse_metrics(_get(f"{prom.url}/metrics"))
        api0 = request_counts(parse_metrics(cluster.kubectl("get", "--raw", "/metrics").stdout))
        try:
            wait_for(lambda: bool(op.passes()) and op.passes()[-1][1] >= first + passes,
                     timeout=passes * (interval + 120) + 60, interval=0.2,
                     desc=f"{passes} periodic passes")
        except TimeoutError:
            got = (op.passes()[-1][1] if op.passes() else 0) - first
            res.notes.append(f"only {got} of {passes} periodic passes finished within "
                             f"{passes * (interval + 120) + 60:.0f}s; figures per pass "
                             "are over the passes that did")
        op1, cpu1 = op.metrics(), op.cpu()
        prom1 = parse_metrics(_get(f"{prom.url}/metrics"))
        api1 = request_counts(parse_metrics(cluster.kubectl("get", "--raw", "/metrics").stdout))
        res.rss_mb = op.rss()
        status1 = custom.get_namespaced_custom_object(
            GROUP, "v1alpha1", ns0, "inferenceservices", name0).get("status") or {}
        res.status_changes = changed_paths(status0, status1)
        res.rss_mb_max = max(rss_max, res.rss_mb)
        done_passes = total(op1, "slo_operator_periodic_passes_total", result="ok") - total(
            op0, "slo_operator_periodic_passes_total", result="ok")
        k = max(1.0, done_passes)
        res.passes = int(done_passes)
        window = [p for p in op.passes() if p[1] >= first]
        res.pass_s = pass_durations(window, interval)
        res.pass_writes_logged = [w for _, _, w in window[1:]]

        def delta(a: list[Sample], b: list[Sample], name: str, **m: str) -> float:
            return total(b, name, **m) - total(a, name, **m)

        res.service_reconcile_s_per_pass = delta(
            op0, op1, "slo_operator_reconcile_duration_seconds_sum", kind="InferenceService") / k
        res.query_s_per_pass = delta(
            op0, op1, "slo_operator_prometheus_query_duration_seconds_sum") / k
        res.queries_per_pass = delta(
            op0, op1, "slo_operator_prometheus_query_duration_seconds_count") / k
        res.engine_queries_per_pass = delta(
            prom0, prom1, "prometheus_engine_query_duration_seconds_count",
            slice="inner_eval") / k
        res.samples_per_pass = delta(prom0, prom1, "prometheus_engine_query_samples_total") / k
        req = {key: api1[key] - api0[key] for key in api1 if api1[key] != api0[key]}
        res.requests_per_pass = {"/".join(x for x in key if x): v / k for key, v in req.items()}
        res.status_writes_per_pass = {
            reason: d / k for reason in sorted(label_values(op1, STATUS_WRITES, "reason"))
            if (d := delta(op0, op1, STATUS_WRITES, reason=reason))}
        res.operator_events_per_pass = {
            reason: d / k for reason in sorted(label_values(op1, EVENTS_POSTED, "reason"))
            if (d := delta(op0, op1, EVENTS_POSTED, reason=reason))}
        res.writes_per_pass = sum(v for key, v in req.items() if key[0] in WRITES) / k
        res.reads_per_pass = sum(v for key, v in req.items() if key[0] in READS) / k
        res.cpu_s_per_pass = (cpu1 - cpu0) / k
        _say(f"N={n}: done")
        return res
    finally:
        if op is not None:
            op.stop()
        if prom is not None:
            prom.stop()
        if exporter is not None:
            exporter.stop()
        cluster.stop()


def run(ns: Sequence[int], *, interval: float, workers: int, passes: int, out: Path,
        cold_timeout: float = 900.0) -> list[Result]:
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for n in ns:
        try:
            results.append(run_one(n, interval=interval, workers=workers, passes=passes,
                                   out=out, cold_timeout=cold_timeout))
        except Exception as e:  # one N that fails must not lose the others
            _say(f"N={n}: failed: {e!r}")
            failed = Result(n=n, namespaces=0, policies=0, nodes=0, interval=interval,
                            workers=workers, notes=[f"failed: {e!r}"[:500]])
            results.append(failed)
        (out / "scale.json").write_text(json.dumps(
            {"machine": {"cpus": os.cpu_count()}, "results": [r.as_dict() for r in results]},
            indent=2))
        (out / "scale.md").write_text(markdown(results))
        print(markdown(results), flush=True)
    return results
