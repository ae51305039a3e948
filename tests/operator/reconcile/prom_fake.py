"""A fake Prometheus for the SLO loop: instant-query results shaped like the real API's.

Latency queries answer as Prometheus does: each percentile the query asks for
(``histogram_quantile(q, ...)``, read from its text) over the fake's buckets, plus the
observation rate (``quantile="count"``).

``FakeMetrics.loads`` sets, per service, the load and latency the queries report; every
query the pass sends is recorded, so tests can assert how many a pass makes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from slo_operator.api.observe import ServiceKey
from slo_operator.slo.histogram import quantile
from slo_operator.slo.promql import COUNT

LE = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, float("inf"))


@dataclass(frozen=True)
class Load:
    rate: float = 5.0  # finished requests per second
    e2e_s: float = 0.4  # every request's end-to-end latency
    ttft_s: float = 0.08
    waiting: float = 0.0
    running: float = 4.0
    kv: float = 0.3
    pods: int = 1
    prompt_tokens: float = 500.0  # per request
    output_tokens: float = 100.0


def _hist(ns: str, svc: str, rate: float, latency: float, **tags: str) -> list[dict[str, Any]]:
    rows = []
    for le in LE:
        v = rate if latency <= le else 0.0
        rows.append({"metric": {"namespace": ns, "service": svc, "le": _le(le), **tags},
                     "value": [0.0, str(v)]})
    return rows


def _latency(ns: str, svc: str, rate: float, latency: float, quantiles: list[str],
             **tags: str) -> list[dict[str, Any]]:
    buckets = [(le, rate if latency <= le else 0.0) for le in LE]
    rows = [{"metric": {"namespace": ns, "service": svc, "quantile": COUNT, **tags},
             "value": [0.0, str(rate)]}]
    for q in quantiles:
        v = quantile(float(q), buckets)
        rows.append({"metric": {"namespace": ns, "service": svc, "quantile": q, **tags},
                     "value": [0.0, "NaN" if v is None else str(v)]})
    return rows


def _le(le: float) -> str:
    return "+Inf" if le == float("inf") else f"{le:g}"


@dataclass
class FakeMetrics:
    loads: dict[ServiceKey, Load] = field(default_factory=dict)
    down: bool = False  # every query fails, as with Prometheus stopped
    calls: list[dict[str, str]] = field(default_factory=list)
    window: str = "60s"

    async def run(self, queries: Mapping[str, str], at: float) -> dict[str, Any]:
        self.calls.append(dict(queries))
        if self.down:
            return dict.fromkeys(queries)
        return {name: self._result(name, expr, at) for name, expr in queries.items()}

    def _result(self, name: str, expr: str, at: float) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        qs = sorted(set(re.findall(r"histogram_quantile\(([^,]+),", expr)))
        w = self.window
        for key, ld in self.loads.items():
            ns, svc = key.namespace, key.name

            def row(value: float, **tags: str) -> dict[str, Any]:
                return {"metric": {"namespace": ns, "service": svc, **tags},  # noqa: B023
                        "value": [at, str(value)]}

            if name == "e2e":
                out += _latency(ns, svc, ld.rate, ld.e2e_s, qs, window=w, source="gateway")
            elif name == "ttft":
                out += _latency(ns, svc, ld.rate, ld.ttft_s, qs, window=w, source="gateway")
            elif name == "itl":
                out += _latency(ns, svc, ld.rate * ld.output_tokens, 0.02, qs, window=w,
                                source="engine")
            elif name == "decode":
                out += _hist(ns, svc, ld.rate, 0.02, window=w, source="request")
                out.append(row(ld.rate * 0.02, window=w, source="request", le="sum"))
            elif name == "throughput":
                out += [row(ld.rate, window=w, signal="requests"),
                        row(ld.rate * ld.prompt_tokens, window=w, signal="prompt_tokens"),
                        row(ld.rate * ld.output_tokens, window=w, signal="generation_tokens"),
                        row(0.0, window=w, signal="preemptions")]
            elif name == "waiting":
                out.append(row(ld.waiting, source="engine"))
            elif name == "running":
                out += [row(ld.running, stat="sum"), row(ld.pods, stat="pods"),
                        row(at, stat="newest")]
            elif name == "kv":
                out.append(row(ld.kv, source="engine"))
        return out
