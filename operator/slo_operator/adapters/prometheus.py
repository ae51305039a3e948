"""The Prometheus adapter: runs one cycle's PromQL queries, never raises.

``prometheus-api-client`` is synchronous, so each query runs in a worker thread (the
queries of one cycle run side by side) and the event loop stays free. The threads are the
adapter's own, not the loop's default executor that the Kubernetes calls share: a burst
of watch events (a cold start of 1,000 services) queued there ahead of the queries held
them past their timeout before they were sent (docs/scale.md). Every failure
(connection refused, timeout, HTTP error, a reply that is not JSON) becomes ``None`` for
that query, which the signal parser turns into a typed ``MetricsState`` (Partial or
Unavailable); the loop never sees an exception from here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from urllib3.util.retry import Retry

log = logging.getLogger(__name__)

Result = list[dict[str, Any]] | None


class MetricsSource(Protocol):
    """What the SLO loop needs from Prometheus (a fake in tests)."""

    async def run(self, queries: Mapping[str, str], at: float) -> dict[str, Result]:
        """Results by query name; None for a query that failed."""
        ...


@dataclass
class QueryError:
    """Why the last failed query failed (for the MetricsAvailable message)."""

    name: str
    message: str


def redact_url(url: str | None) -> str | None:
    """``url`` without a password (user:password@host -> user:***@host) for logs,
    Events and status."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


class PrometheusAdapter:
    """Instant queries against one Prometheus, each in a thread with a timeout."""

    def __init__(self, url: str, timeout: float = 10.0,
                 on_query: Callable[[str, float, bool], None] | None = None,
                 threads: int = 10,
                 digest: Callable[[str, Result], Any] | None = None) -> None:
        """``on_query(name, seconds, ok)`` is called after every query (the operator's
        own metrics); the adapter itself knows no metrics registry. ``threads``: queries
        in flight at once, in the adapter's own pool (the operator passes its number of
        queries per cycle, so one cycle's run side by side; 10 is the cycle's budget)."""
        self.url = url.rstrip("/")
        # What logs and messages show: the password never leaves the adapter.
        self.shown_url = redact_url(self.url) or ""
        self._secret = urlsplit(self.url).password
        self.timeout = timeout
        self.on_query = on_query
        # Applied to each reply in the query's thread (``slo.signals.digest``: indexed as
        # it arrives, so the decoded replies are not all alive at once).
        self.digest = digest
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="promql")
        # One quick retry on a refused connection; a longer back-off would stall the pass
        # while Prometheus is down, and the next pass retries anyway.
        # Retry-After is not slept out in the query's thread: that thread would outlive the
        # query timeout (urllib3 honours up to 6 h) and hold a slot of the query pool.
        retry = Retry(total=1, backoff_factor=0.1, status_forcelist=(502, 503, 504),
                      respect_retry_after_header=False)
        self._client = PrometheusConnect(url=self.url, retry=retry)
        self.last_error: QueryError | None = None

    def query(self, name: str, expr: str, at: float) -> Result:
        """One instant query at ``at`` (seconds since the epoch); None on any failure."""
        try:
            # requests takes a float timeout (the client's hint says int).
            data = self._client.custom_query(expr, params={"time": f"{at:.3f}"},
                                             timeout=self.timeout)
        except (requests.RequestException, PrometheusApiClientException, ValueError,
                KeyError, TypeError) as e:
            self.last_error = QueryError(name, f"{type(e).__name__}: {self._scrub(str(e))[:300]}")
            log.warning("Failed Prometheus query %s at %s: %s", name, self.shown_url,
                        self.last_error.message)
            return None
        if not isinstance(data, list):
            self.last_error = QueryError(name, "reply carried no result list")
            return None
        rows = [r for r in data if isinstance(r, dict)]
        del data
        return self.digest(name, rows) if self.digest is not None else rows

    def _scrub(self, text: str) -> str:
        """``text`` with the URL's password masked (an error that quotes the URL)."""
        return text.replace(self._secret, "***") if self._secret else text

    async def run(self, queries: Mapping[str, str], at: float) -> dict[str, Result]:
        """All queries side by side in worker threads; a query past its timeout is None."""
        self.last_error = None
        names: Sequence[str] = list(queries)

        async def one(name: str) -> Result:
            start = time.monotonic()
            result: Result = None
            try:
                loop = asyncio.get_running_loop()
                result = await asyncio.wait_for(
                    loop.run_in_executor(self._pool, self.query, name, queries[name], at),
                    self.timeout + 1)
            except TimeoutError:
                self.last_error = QueryError(name, f"no answer within {self.timeout:g}s")
            if self.on_query is not None:
                self.on_query(name, time.monotonic() - start, result is not None)
            return result

        results = await asyncio.gather(*(one(n) for n in names))
        return dict(zip(names, results, strict=True))

    def close(self) -> None:
        self._client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
