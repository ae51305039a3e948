"""What Prometheus would hold about simulated services, and what the operator reads from it.

A :class:`Scraper` snapshots every service's cumulative histograms, counters and gauges
every ``scrape_s`` (like a scrape of all pods, summed over pods). Queries then work on
those samples as PromQL does: ``increase`` over ``[window]`` between the newest sample and
the newest one at least ``window`` older, percentiles by ``histogram_quantile``
(``slo.histogram.quantile``, the operator's own implementation) over the bucket
increases, gauges as the newest sample. :func:`observation` turns that into the same
:class:`~slo_operator.api.observe.Observation` the operator's Prometheus adapter builds,
demand signals included: the arrival rate (counted at arrival, before admission, as the
gateway's ``slo_gateway_arrivals``), its peak over short windows (``max_over_time`` of a
rate over two scrape intervals), the prefix cache's token hit share
(``vllm:prefix_cache_hits`` / ``vllm:prefix_cache_queries``) and the mean decode time per
output token (sum over count of the decode histogram, per-request time per output token
first, per-token inter-token latency second: the operator's ``DECODE_SOURCES`` order).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from slo_devtools.sim.discrete_event import Histogram, Phase, Service
from slo_operator.api.observe import (
    MetricsState,
    Observation,
    ReplicaCounts,
    ServiceKey,
    Signals,
)
from slo_operator.slo.histogram import cv_lower_bound, quantile, quantile_floor
from slo_operator.slo.promql import recent_range_s


@dataclass(frozen=True)
class Sample:
    """One scrape of one service (all ready pods summed; KV use is the highest pod's)."""

    t: float
    ttft: tuple[tuple[float, ...], float, float]
    itl: tuple[tuple[float, ...], float, float]
    e2e: tuple[tuple[float, ...], float, float]
    tpot: tuple[tuple[float, ...], float, float]
    answers: tuple[tuple[float, ...], float, float]
    requests: float
    prompt_tokens: float
    gen_tokens: float
    preemptions: float
    arrivals: float
    prefix_queries: float
    prefix_hits: float
    prefill_seconds: float
    prefills: float
    engine_waiting: float
    waiting: float
    running: float
    kv: float
    per_replica: tuple[tuple[int, int, float], ...]


FAMILIES = {"ttft": "ttft", "itl": "itl", "e2e": "e2e", "tpot": "tpot", "answers": "answers"}
# The arrival peak's short window, in scrape intervals: two samples are the shortest span
# a PromQL rate can be computed over.
PEAK_SCRAPES = 2


class Scraper:
    """Samples of every service, every ``scrape_s`` seconds."""

    def __init__(self, services: dict[str, Service], scrape_s: float = 15.0) -> None:
        self.services = services
        self.scrape_s = scrape_s
        self.samples: dict[str, list[Sample]] = {n: [] for n in services}
        self.times: dict[str, list[float]] = {n: [] for n in services}

    def scrape(self, now: float) -> None:
        for name, svc in self.services.items():
            ew, w, run, kv = svc.gauges()
            s = Sample(now, svc.ttft.snapshot(), svc.itl.snapshot(), svc.e2e.snapshot(),
                       svc.tpot.snapshot(), svc.answers.snapshot(), float(svc.requests_done),
                       float(svc.prompt_tokens), float(svc.gen_tokens), float(svc.preemptions),
                       float(svc.arrivals),
                       float(svc.prefix_queries), float(svc.prefix_hits),
                       svc.prefill_seconds, float(svc.prefills), ew, w, run, kv,
                       tuple(svc.per_replica()))
            self.samples[name].append(s)
            self.times[name].append(now)

    # --- PromQL-like reads -------------------------------------------------------------
    def latest(self, name: str, now: float) -> Sample | None:
        i = bisect_right(self.times[name], now)
        return self.samples[name][i - 1] if i else None

    def pair(self, name: str, now: float, window: float) -> tuple[Sample, Sample] | None:
        """(older, newer) samples spanning ``window`` ending at the newest one."""
        new = self.latest(name, now)
        if new is None:
            return None
        old = self.latest(name, new.t - window)
        if old is None:
            old = self.samples[name][0]
        if old.t >= new.t:
            return None
        return old, new

    def increase_buckets(self, name: str, family: str, now: float, window: float
                         ) -> tuple[list[tuple[float, float]], float, float] | None:
        """Cumulative ``(le, increase)`` pairs, count increase and sum increase."""
        p = self.pair(name, now, window)
        if p is None:
            return None
        old, new = (getattr(s, FAMILIES[family]) for s in p)
        bounds = _bounds(self.services[name], family)
        inc = [b - a for a, b in zip(old[0], new[0], strict=True)]
        cum, out = 0.0, []
        for le, c in zip((*bounds, math.inf), inc, strict=True):
            cum += c
            out.append((le, cum))
        return out, new[1] - old[1], new[2] - old[2]

    def quantile(self, name: str, family: str, q: float, now: float, window: float,
                 read: Callable[[float, list[tuple[float, float]]], float | None] = quantile
                 ) -> float | None:
        """``histogram_quantile(q, sum by (le) (increase(family_bucket[window])))``, or
        another ``read`` of the window's buckets (``quantile_floor``)."""
        inc = self.increase_buckets(name, family, now, window)
        if inc is None or inc[1] <= 0:
            return None
        return read(q, inc[0])

    def mean(self, name: str, family: str, now: float, window: float) -> float | None:
        inc = self.increase_buckets(name, family, now, window)
        if inc is None or inc[1] <= 0:
            return None
        return inc[2] / inc[1]

    def rate(self, name: str, counter: str, now: float, window: float) -> float | None:
        p = self.pair(name, now, window)
        if p is None:
            return None
        old, new = p
        delta: float = getattr(new, counter) - getattr(old, counter)
        return delta / (new.t - old.t)

    def peak_rate(self, name: str, counter: str, now: float, window: float,
                  short: float) -> float | None:
        """``max_over_time(rate(counter[short])[window:scrape])``: the highest rate over
        ``short`` seconds ending at a sample inside the window (None when the window
        holds no such span)."""
        p = self.pair(name, now, window)
        if p is None:
            return None
        old, new = p
        times, samples = self.times[name], self.samples[name]
        best: float | None = None
        for i in range(bisect_right(times, old.t), bisect_right(times, new.t)):
            s = samples[i]
            j = bisect_right(times, s.t - short) - 1
            if j < 0 or times[j] < old.t or times[j] >= s.t:
                continue
            r = (getattr(s, counter) - getattr(samples[j], counter)) / (s.t - times[j])
            best = r if best is None else max(best, r)
        return best

    def jitter(self, name: str, now: float, window: float) -> float | None:
        """CV of per-request decode time per token (``vllm:request_time_per_output_token``)
        in the window, as the lower bound the buckets allow (``slo.histogram``)."""
        inc = self.increase_buckets(name, "tpot", now, window)
        if inc is None or inc[1] <= 1:
            return None
        return cv_lower_bound(inc[0], inc[2])


def _bounds(svc: Service, family: str) -> tuple[float, ...]:
    h: Histogram = getattr(svc, family)
    return h.bounds


@dataclass(frozen=True)
class Percentiles:
    """Which percentile of each latency the policy's objectives use (0..1)."""

    e2e: float = 0.99
    ttft: float = 0.95
    itl: float = 0.99


def replica_counts(svc: Service, now: float, warmup_s: float = 60.0) -> ReplicaCounts:
    """What the watch caches would show for the service's Deployment."""
    ready = [r for r in svc.replicas if r.phase is Phase.READY]
    starting = [r for r in svc.replicas if r.phase is Phase.STARTING]
    warming = [r for r in ready if now - r.ready_at < warmup_s]
    return ReplicaCounts(desired=svc.desired, ready=len(ready), warming=len(warming),
                         starting=len(starting), pending=0)


def observation(scr: Scraper, svc: Service, now: float, window: float, pct: Percentiles,
                *, hardware: str, precision: str, labels: dict[str, str] | None = None,
                model_size_b: float | None = None) -> Observation:
    """The operator's view of one service at ``now`` from the scraped samples."""
    name = svc.name
    latest = scr.latest(name, now)
    key = ServiceKey("bench", name)
    counts = replica_counts(svc, now)
    if latest is None:
        return Observation(key, now, Signals(state=MetricsState.EMPTY), counts, svc.limit,
                           svc.max_num_seqs, hardware, precision,
                           max_num_batched_tokens=svc.budget, labels=labels or {},
                           model_size_b=model_size_b)
    rate = scr.rate(name, "requests", now, window)
    e2e = scr.quantile(name, "e2e", pct.e2e, now, window)
    ttft = scr.quantile(name, "ttft", pct.ttft, now, window)
    itl = scr.quantile(name, "itl", pct.itl, now, window)
    state = MetricsState.OK if e2e is not None else MetricsState.NO_TRAFFIC
    p = scr.pair(name, now, window)
    queried = p[1].prefix_queries - p[0].prefix_queries if p else 0.0
    prefills = p[1].prefills - p[0].prefills if p else 0.0
    # As the operator reads it (``slo.signals``): the token-weighted inter-token mean
    # first, the per-request mean where no token was timed.
    decode = scr.mean(name, "itl", now, window)
    if decode is None:
        decode = scr.mean(name, "tpot", now, window)
    sig = Signals(
        state=state,
        e2e_ms=None if e2e is None else e2e * 1e3,
        ttft_ms=None if ttft is None else ttft * 1e3,
        itl_ms=None if itl is None else itl * 1e3,
        jitter=scr.jitter(name, now, window),
        request_rate=rate,
        prompt_tokens_rate=scr.rate(name, "prompt_tokens", now, window),
        generation_tokens_rate=scr.rate(name, "gen_tokens", now, window),
        waiting=latest.waiting,
        running=latest.running,
        kv_usage=latest.kv,
        preemptions_rate=scr.rate(name, "preemptions", now, window),
        sample_time=latest.t,
        arrival_rate=scr.rate(name, "arrivals", now, window),
        arrival_recent_rate=scr.rate(name, "arrivals", now,
                                     recent_range_s(window, scr.scrape_s)),
        arrival_peak_rate=scr.peak_rate(name, "arrivals", now, window, PEAK_SCRAPES * scr.scrape_s),
        prefix_hit_share=(p[1].prefix_hits - p[0].prefix_hits) / queried
        if p and queried > 0 else None,
        decode_mean_ms=None if decode is None else decode * 1e3,
        prefill_mean_ms=(p[1].prefill_seconds - p[0].prefill_seconds) / prefills * 1e3
        if p and prefills > 0 else None,
        answer_tail_tokens=scr.quantile(name, "answers", pct.e2e, now, window,
                                        read=quantile_floor),
    )
    # Both routings simulated pool the requests (the replica with the fewest outstanding,
    # or one queue per service), as an InferencePool's endpoint picker does.
    return Observation(key, now, sig, counts, svc.limit, svc.max_num_seqs, hardware, precision,
                       max_num_batched_tokens=svc.budget, labels=labels or {},
                       model_size_b=model_size_b, pooled_routing=True)
