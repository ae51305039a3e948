"""Integration suites run against the real local control plane."""

from tests.support.fixtures import *  # noqa: F403  (fixtures and the log-copying hook)
