"""Alias of ``slo_operator.devenv.pki``: the local control plane moved into the package so that
``slo-operator demo`` can start it; tests may import either path (one module object)."""

import sys

from slo_operator.devenv import pki as _moved

sys.modules[__name__] = _moved
