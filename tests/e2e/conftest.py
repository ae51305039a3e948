"""End-to-end suite: real control plane + real Prometheus + replica models + the operator."""

from tests.e2e.e2e_support import *  # noqa: F403  (the stack fixture)
from tests.support.fixtures import *  # noqa: F403  (cluster, namespace, log-copying hook)
from tests.support.prometheus import *  # noqa: F403  (prometheus_binary)
