"""The control package exports the public interface its docstring names, and nothing else."""

from __future__ import annotations

import slo_operator.control as control


def test_exports_are_the_public_interface() -> None:
    assert control.__all__ == sorted(control.__all__)
    assert set(control.__all__) == {
        "ControlPolicy", "ControlState", "Decision", "GpuRequest", "Grant", "StepTimes",
        "arbitrate", "decide", "policy_for", "replica_bounds", "seed_step_times",
    }


def test_every_export_resolves_and_is_documented() -> None:
    namespace: dict[str, object] = {}
    exec("from slo_operator.control import *", namespace)
    for name in control.__all__:
        assert namespace[name] is getattr(control, name)
    doc = control.__doc__ or ""
    for name in ("policy_for", "decide", "ControlState.from_dict", "arbitrate"):
        assert f"{name}(" in doc
