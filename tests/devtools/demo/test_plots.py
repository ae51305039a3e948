"""The demo's plots are written as PNG files, one per service."""

from __future__ import annotations

from pathlib import Path

from slo_devtools.demo.plots import plot_all
from slo_devtools.demo.timeline import Sample, Targets


def test_one_png_per_service(tmp_path: Path) -> None:
    targets = Targets(6000.0, 0.99, 500.0, 0.95, 0.2)
    samples = [Sample(t=float(i), service=svc, offered_rps=float(i), ready=1 + i % 3,
                      desired=2, batch_limit=64 - i, e2e_ms=5000.0 + 100 * i,
                      ttft_ms=None if i < 2 else 300.0, targets=targets)
               for svc in ("a/x", "b/y") for i in range(6)]
    paths = plot_all(samples, tmp_path, 20.0)
    assert [p.name for p in paths] == ["a_x.png", "b_y.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_inter_token_panel_only_with_its_target(tmp_path: Path) -> None:
    import matplotlib.image

    base = Targets(6000.0, 0.99, 500.0, 0.95, 0.2)
    with_itl = Targets(6000.0, 0.99, 500.0, 0.95, 0.2, itl_ms=75.0)
    heights = []
    for name, targets in (("a/x", base), ("b/y", with_itl)):
        samples = [Sample(t=float(i), service=name, itl_ms=50.0, targets=targets)
                   for i in range(3)]
        [path] = plot_all(samples, tmp_path, 20.0)
        heights.append(matplotlib.image.imread(path).shape[0])
    assert heights[1] > heights[0]
