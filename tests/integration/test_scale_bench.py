"""The scale benchmark end to end at N=10 (its own small cluster, a real Prometheus, the
operator as a subprocess): every figure it reports is measured, not left at zero."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from slo_devtools.devenv.control_plane import Binaries
from slo_devtools.scale import benchmark, synthetic
from tests.support.prometheus import prometheus_binary  # noqa: F401

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]
N = 10


@pytest.fixture
def binaries(prometheus_binary: tuple[Path, str]) -> None:  # noqa: F811
    missing = Binaries.discover().missing()
    if missing:
        msg = f"control-plane binaries not built ({', '.join(missing)})"
        if os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)


def test_scale_benchmark_at_ten_services(binaries: None, tmp_path: Path) -> None:
    (r,) = benchmark.run([N], interval=2.0, workers=8, passes=3, out=tmp_path,
                         cold_timeout=90.0)
    assert r.reconciled_s is not None and r.reconciled_s < 90, r.notes
    assert r.passes >= 3 and len(r.pass_s) >= 3
    # The fixed query set: 10 per pass whatever N (the budget), all seen by Prometheus.
    assert 7 <= r.queries_per_pass <= 10
    assert r.engine_queries_per_pass >= r.queries_per_pass - 1
    assert r.samples_per_pass > 0
    assert r.series == N * synthetic.series_per_pod()
    assert r.cpu_s_per_pass > 0 and r.rss_mb > 50
    # Steady synthetic traffic, nothing changing: no write at all across the counted passes
    # (the law's memory moves every pass but waits in the operator for the next write).
    assert r.writes_per_pass == 0, r.requests_per_pass
    data = json.loads((tmp_path / "scale.json").read_text())
    assert [x["n"] for x in data["results"]] == [N]
    assert "| 10 |" in (tmp_path / "scale.md").read_text()
