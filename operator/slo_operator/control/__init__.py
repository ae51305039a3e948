"""The control law and the fleet step (pure: no clock, no I/O, no client).

Public interface::

    policy_for(spec, bounds=None, *, step_times=None) -> ControlPolicy
    decide(obs, policy, state, now) -> Decision
    ControlState.from_dict(d) / state.to_dict()
    arbitrate(requests, free_gpus, budgets) -> dict[ServiceKey, Grant]
"""

from slo_operator.control.arbitrate import GpuRequest, Grant, arbitrate
from slo_operator.control.capacity import StepTimes, seed_step_times
from slo_operator.control.law import Decision, decide
from slo_operator.control.policy import ControlPolicy, policy_for, replica_bounds
from slo_operator.control.state import ControlState

__all__ = [
    "ControlPolicy",
    "ControlState",
    "Decision",
    "GpuRequest",
    "Grant",
    "StepTimes",
    "arbitrate",
    "decide",
    "policy_for",
    "replica_bounds",
    "seed_step_times",
]
