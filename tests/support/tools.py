"""Locate the real tools the ship tests run (promtool, glua); skip with a message when absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slo_devtools.devenv.control_plane import Binaries, bin_cache
from tests.support.paths import REPO

ROOT = REPO


def promtool() -> Path:
    found = Binaries.discover().promtool
    if found is None or not os.access(found, os.X_OK):
        pytest.skip("promtool not built: run `bash hack/build-binaries.sh --only prometheus`")
    return found


def glua() -> Path:
    env = os.environ.get("SLO_GLUA")
    candidates = [Path(env)] if env else sorted(bin_cache().glob("glua-*/glua"), reverse=True)
    for c in candidates:
        if os.access(c, os.X_OK):
            return c
    pytest.skip("glua (gopher-lua, Argo CD's Lua) not built: run `bash hack/build-glua.sh`")
