"""The Prometheus runner on its own: file service discovery, labels, an outage and back.

No control plane: one replica model behind the real gateway on loopback is the target.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from slo_devtools.devenv.control_plane import wait_for
from slo_devtools.devenv.prometheus_server import PrometheusServer, Target
from slo_devtools.replica.server import LinearSteps, Replica
from slo_runtime import contract
from slo_runtime.gateway import Gateway, GatewayConfig, start_site

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


@pytest.fixture
def pod_url() -> Iterator[str]:
    """A gateway + replica model on loopback, served from a background event loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def up() -> tuple[list[object], str]:
        rep = Replica("m", LinearSteps(base_ms=1, per_seq_ms=0, prefill_ms_per_token=0))
        r_runner, r_port = await start_site(rep.app, "127.0.0.1", 0)
        gw = Gateway(GatewayConfig(upstream=f"http://127.0.0.1:{r_port}"))
        g_runner, g_port = await start_site(gw.app, "127.0.0.1", 0)
        return [g_runner, r_runner], f"127.0.0.1:{g_port}"

    runners, addr = asyncio.run_coroutine_threadsafe(up(), loop).result(10)
    yield addr

    async def down() -> None:
        for r in runners:
            await r.cleanup()  # type: ignore[attr-defined]

    asyncio.run_coroutine_threadsafe(down(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)


def test_file_sd_targets_labels_and_an_outage(prometheus: PrometheusServer,
                                              pod_url: str) -> None:
    assert prometheus.version != "unknown"
    labels = {"namespace": "team-a", "pod": "chat-0", "service": "chat", "tenant": "acme"}
    prometheus.set_targets([Target(pod_url, labels, contract.GATEWAY_METRICS_PATH),
                            Target(pod_url, labels, contract.ENGINE_METRICS_PATH)])
    up = prometheus.wait_target_up({"service": "chat"}, count=2, timeout=30)
    assert {t["labels"]["tenant"] for t in up} == {"acme"}
    assert {t["scrapeUrl"].rsplit(pod_url, 1)[1] for t in up} == {"/metrics", "/engine/metrics"}
    series = prometheus.wait_query('vllm:num_requests_running{service="chat"}')
    assert series[0]["metric"]["pod"] == "chat-0"
    assert series[0]["metric"]["model_name"] == "m"

    # An outage: queries fail; back on the same port, scraping the same targets.
    port = prometheus.port
    prometheus.stop_process()
    with pytest.raises(OSError):
        prometheus.query("up")
    prometheus.start()
    assert prometheus.port == port
    prometheus.wait_target_up({"service": "chat"}, count=2, timeout=30)

    # Targets go as they came: an empty file leaves nothing to scrape.
    prometheus.set_targets([])
    wait_for(lambda: not prometheus.active_targets(), timeout=30, desc="targets dropped")
