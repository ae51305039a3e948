"""The replica model is served through the same fixture as the runtime tests."""

from tests.runtime.conftest import servers  # noqa: F401
