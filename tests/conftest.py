"""Fixtures every suite may use."""

from tests.support.golden import golden  # noqa: F401
