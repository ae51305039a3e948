"""Listening ports for the local stack are picked where outgoing connections cannot take them."""

from __future__ import annotations

import socket
from pathlib import Path

from slo_devtools.devenv.control_plane import PORT_SPAN, ephemeral_range, free_port


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_ports_come_from_below_the_ephemeral_range_and_are_never_handed_out_twice(
        tmp_path: Path) -> None:
    rng = tmp_path / "range"
    rng.write_text("40000\t60999\n")
    ports = [free_port(rng) for _ in range(60)]
    assert len(set(ports)) == len(ports)
    assert all(40000 - PORT_SPAN <= p < 40000 for p in ports)
    assert all(_bindable(p) for p in ports)


def test_a_range_that_leaves_no_room_below_it_falls_back_to_the_kernels_pick(
        tmp_path: Path) -> None:
    rng = tmp_path / "range"
    rng.write_text("1500 60999")
    ports = [free_port(rng) for _ in range(10)]
    assert len(set(ports)) == len(ports)
    assert all(p >= ephemeral_range()[0] for p in ports)  # the machine's own range


def test_an_unreadable_or_malformed_range_reads_as_linuxs_default(tmp_path: Path) -> None:
    assert ephemeral_range(tmp_path / "missing") == (32768, 60999)
    bad = tmp_path / "bad"
    bad.write_text("low high")
    assert ephemeral_range(bad) == (32768, 60999)
