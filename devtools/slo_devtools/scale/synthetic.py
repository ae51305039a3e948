"""A synthetic source of vLLM series for many services, from one process.

One aiohttp server answers ``/metrics`` with vLLM 0.32.0's metric names (the families the
operator's queries read: e2e, TTFT, inter-token and per-output-token histograms, the
request/token/preemption and prefix-cache counters, running, waiting and KV use) and the
gateway's arrival counter (``slo_gateway_arrivals_total``, as every operator-made pod runs
the gateway) for every pod of every service listed in a spec file, each series carrying
the labels the operator groups by:
``namespace``, ``service``, ``pod``, ``tenant`` (and vLLM's own ``engine``,
``model_name``). The real Prometheus scrapes it as one target with ``honor_labels`` (as
``slo_devtools.devenv.prometheus_server`` configures), so 1,000 services cost one scrape,
not 1,000 processes.

Traffic is steady: requests arrive at every pod at ``rate`` per second and finish at the
same rate, with latencies spread evenly over fixed ranges well inside the default
objectives, so a settled operator has nothing to change. Counters grow linearly from the
process start. The spec file (JSON list of
``{"namespace", "service", "tenant", "pods": [...]}``) is re-read when it changes, so pods
can be added as the operator creates them.

    python -m slo_devtools.scale.synthetic --spec services.json --port 9400
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from slo_runtime import contract as c

# Latency ranges (seconds) of the synthetic requests: uniform between lo and hi.
E2E_RANGE = (0.30, 0.60)
TTFT_RANGE = (0.02, 0.10)
ITL_RANGE = (0.010, 0.030)
PREFILL_RANGE = (0.004, 0.016)  # scheduled to first token: inside TTFT_RANGE's spread
PROMPT_TOKENS = 200.0  # per request
GENERATION_TOKENS = 100.0  # per request
RUNNING = 2.0
WAITING = 0.0
KV_USAGE = 0.10
# Share of prompt tokens found in vLLM's prefix cache: strictly between 0 and 1, so a
# reader that swapped hits and lookups, or dropped one, reads a different value.
PREFIX_HIT_SHARE = 0.25

HISTOGRAMS: tuple[tuple[str, tuple[float, ...], tuple[float, float]], ...] = (
    (c.E2E_LATENCY, c.REQUEST_LATENCY_BUCKETS, E2E_RANGE),
    (c.TTFT, c.TTFT_BUCKETS, TTFT_RANGE),
    (c.INTER_TOKEN_LATENCY, c.INTER_TOKEN_BUCKETS, ITL_RANGE),
    (c.TIME_PER_OUTPUT_TOKEN, c.INTER_TOKEN_BUCKETS, ITL_RANGE),
)


@dataclass(frozen=True)
class ServiceSeries:
    """One service and the pods it reports for."""

    namespace: str
    service: str
    tenant: str
    pods: tuple[str, ...]


def uniform_cdf(le: float, lo: float, hi: float) -> float:
    """Fraction of a uniform [lo, hi] distribution at or below ``le``."""
    if le <= lo:
        return 0.0
    if le >= hi:
        return 1.0
    return (le - lo) / (hi - lo)


def _fmt_le(le: float) -> str:
    return repr(float(le))


def pod_lines(svc: ServiceSeries, pod: str, rate: float) -> list[tuple[str, float, bool]]:
    """(series text before the value, value or value per second, grows with time)."""
    base = (f'namespace="{svc.namespace}",service="{svc.service}",pod="{pod}",'
            f'tenant="{svc.tenant}",engine="0",model_name="{svc.service}"')
    out: list[tuple[str, float, bool]] = []
    itl_per_request = GENERATION_TOKENS  # inter-token observations per request
    for name, buckets, (lo, hi) in HISTOGRAMS:
        per_s = rate * (itl_per_request if name == c.INTER_TOKEN_LATENCY else 1.0)
        for le in buckets:
            out.append((f'{name}_bucket{{{base},le="{_fmt_le(le)}"}}',
                        per_s * uniform_cdf(le, lo, hi), True))
        out.append((f'{name}_bucket{{{base},le="+Inf"}}', per_s, True))
        out.append((f"{name}_sum{{{base}}}", per_s * (lo + hi) / 2, True))
        out.append((f"{name}_count{{{base}}}", per_s, True))
    # vLLM's prefill time: the operator reads its mean only (sum and count).
    out.append((f"{c.PREFILL_TIME}_sum{{{base}}}", rate * sum(PREFILL_RANGE) / 2, True))
    out.append((f"{c.PREFILL_TIME}_count{{{base}}}", rate, True))
    out.append((f'{c.REQUEST_SUCCESS}{c.COUNTER_SUFFIX}{{{base},finished_reason="stop"}}',
                rate, True))
    out.append((f"{c.PROMPT_TOKENS}{c.COUNTER_SUFFIX}{{{base}}}", rate * PROMPT_TOKENS, True))
    out.append((f"{c.GENERATION_TOKENS}{c.COUNTER_SUFFIX}{{{base}}}",
                rate * GENERATION_TOKENS, True))
    out.append((f"{c.NUM_PREEMPTIONS}{c.COUNTER_SUFFIX}{{{base}}}", 0.0, True))
    prompt = rate * PROMPT_TOKENS
    out.append((f"{c.PREFIX_CACHE_QUERIES}{c.COUNTER_SUFFIX}{{{base}}}", prompt, True))
    out.append((f"{c.PREFIX_CACHE_HITS}{c.COUNTER_SUFFIX}{{{base}}}",
                prompt * PREFIX_HIT_SHARE, True))
    # The gateway's own series: pod labels and the tenant only (no engine labels).
    gw = f'namespace="{svc.namespace}",service="{svc.service}",pod="{pod}",tenant="{svc.tenant}"'
    out.append((f"{c.GATEWAY_ARRIVALS}{c.COUNTER_SUFFIX}{{{gw}}}", rate, True))
    out.append((f"{c.NUM_REQUESTS_RUNNING}{{{base}}}", RUNNING, False))
    out.append((f"{c.NUM_REQUESTS_WAITING}{{{base}}}", WAITING, False))
    out.append((f"{c.KV_CACHE_USAGE}{{{base}}}", KV_USAGE, False))
    return out


def series_per_pod() -> int:
    """How many series one pod exposes."""
    return len(pod_lines(ServiceSeries("n", "s", "t", ("p",)), "p", 1.0))


def render(lines: Sequence[tuple[str, float, bool]], elapsed: float) -> str:
    """The exposition text at ``elapsed`` seconds after the start."""
    parts = [f"{text} {value * elapsed if grows else value:.6g}\n"
             for text, value, grows in lines]
    return "".join(parts)


def load_spec(data: Iterable[Mapping[str, object]]) -> list[ServiceSeries]:
    out = []
    for item in data:
        pods = item.get("pods") or ()
        if not isinstance(pods, list | tuple):
            raise ValueError(f"spec: pods of service {item.get('service')!r} must be a list, "
                             f"got {pods!r}")
        out.append(ServiceSeries(str(item["namespace"]), str(item["service"]),
                                 str(item.get("tenant", item["namespace"])),
                                 tuple(str(p) for p in pods)))
    return out


def all_lines(services: Iterable[ServiceSeries], rate: float) -> list[tuple[str, float, bool]]:
    return [line for svc in services for pod in svc.pods for line in pod_lines(svc, pod, rate)]


def write_spec(path: Path, services: Iterable[ServiceSeries]) -> None:
    """Write the spec atomically (the server re-reads it when its mtime changes)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"namespace": s.namespace, "service": s.service,
                                "tenant": s.tenant, "pods": list(s.pods)} for s in services]))
    os.replace(tmp, path)


def serve(spec: Path, port: int, rate: float, host: str = "127.0.0.1") -> None:
    from aiohttp import web

    start = time.time()
    state: dict[str, object] = {"mtime": None, "lines": []}

    def lines() -> list[tuple[str, float, bool]]:
        try:
            mtime = spec.stat().st_mtime_ns
        except FileNotFoundError:
            return []
        if mtime != state["mtime"]:
            state["lines"] = all_lines(load_spec(json.loads(spec.read_text())), rate)
            state["mtime"] = mtime
        return state["lines"]  # type: ignore[return-value]

    async def metrics(_: web.Request) -> web.Response:
        body = render(lines(), time.time() - start)
        return web.Response(text=body, content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    web.run_app(app, host=host, port=port, print=None, access_log=None)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--spec", type=Path, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rate", type=float, default=1.0, help="requests/s per pod")
    a = p.parse_args(argv)
    serve(a.spec, a.port, a.rate)


if __name__ == "__main__":  # pragma: no cover
    main()
