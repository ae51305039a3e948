"""Fixtures for the runtime tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.runtime.rt_support import Servers


@pytest.fixture
async def servers() -> AsyncIterator[Servers]:
    s = Servers()
    yield s
    await s.close()
