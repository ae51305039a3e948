"""decide() closing the loop around a toy plant: converges, does not flap, scales back in.

The plant is a fluid model of replicas (pure, no clock): each replica serves at most the
rate the step-time model gives at the live limit, 20% slower than the seed the law starts
from (so the law must learn); new replicas are ready 60 s after they are asked for;
excess arrivals queue. Latencies follow from the queue and the batch.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from slo_operator.api.observe import MetricsState, Observation, ReplicaCounts, Signals
from slo_operator.control import ControlState, decide
from slo_operator.control.capacity import DEFAULT_STEP_TIMES, rate_at_batch
from tests.operator.control.control_support import KEY, OUTPUT, PROMPT, T0, make_policy

CYCLE = 15.0
COLD_START = 60.0
WARM_UP = 30.0
TRUE_SPEED = 0.8


@dataclass
class Plant:
    ready_at: list[float] = field(default_factory=list)
    queue: float = 0.0
    limit: int = 64

    def set_replicas(self, n: int, now: float) -> None:
        while len(self.ready_at) < n:
            self.ready_at.append(now + COLD_START)
        while len(self.ready_at) > n:
            self.ready_at.remove(max(self.ready_at))  # the newest (least ready) goes first

    def step(self, now: float, lam: float) -> Observation:
        st = DEFAULT_STEP_TIMES.scaled(TRUE_SPEED)
        ready = sum(1 for t in self.ready_at if t <= now)
        warming = sum(1 for t in self.ready_at if now - WARM_UP < t <= now)
        mu = rate_at_batch(st, self.limit, PROMPT, OUTPUT, utilization=1.0)
        cap = ready * mu
        served = min(lam + self.queue / CYCLE, cap)
        self.queue = max(0.0, self.queue + (lam - served) * CYCLE)
        u = min(0.99, served / cap) if cap else 0.0
        # Little's law: sequences in flight = rate x decode time; the limit caps it.
        lam_r = served / ready if ready else 0.0
        room = 1000.0 - lam_r * OUTPUT * st.per_seq_ms
        batch = min(float(self.limit), lam_r * OUTPUT * st.base_ms / room) if room > 0 \
            else float(self.limit)
        batch = max(1.0, batch) if served else 0.0
        if lam + self.queue / CYCLE >= cap:
            batch = float(self.limit)  # saturated: every slot is taken
        prefill_ms = st.prefill_ms_per_token * PROMPT + st.step_ms(max(1.0, batch))
        wait_ms = (self.queue / cap * 1000.0 if cap else 60_000.0) \
            + prefill_ms * u / (2 * (1 - u))
        ttft = prefill_ms + wait_ms
        itl = st.step_ms(max(1.0, batch))
        sig = Signals(
            state=MetricsState.OK, e2e_ms=ttft + 2 * OUTPUT * itl, ttft_ms=ttft, itl_ms=itl,
            request_rate=served, prompt_tokens_rate=served * PROMPT,
            generation_tokens_rate=served * OUTPUT, waiting=self.queue,
            running=ready * batch, sample_time=now,
        )
        n = len(self.ready_at)
        return Observation(
            key=KEY, now=now, signals=sig,
            replicas=ReplicaCounts(desired=n, ready=ready, warming=warming, starting=n - ready),
            batch_limit=self.limit, max_batch=64, hardware="H200", precision="bf16",
        )


def load(t: float) -> float:
    """10 req/s for 10 min, 60 req/s for 20 min, 10 req/s for 30 min."""
    return 60.0 if 600 <= t < 1800 else 10.0


def run() -> list[tuple[float, int, bool, str]]:
    policy = make_policy()
    plant, state = Plant(), ControlState()
    plant.set_replicas(1, T0 - 600)
    trace = []
    for i in range(int(3600 / CYCLE)):
        t = i * CYCLE
        obs = plant.step(T0 + t, load(t))
        good = (obs.signals.e2e_ms or 0) <= policy.e2e_target_ms \
            and (obs.signals.ttft_ms or 0) <= policy.ttft_target_ms
        d = decide(obs, policy, state, T0 + t)
        state = d.state
        plant.set_replicas(d.replicas, T0 + t)
        plant.limit = d.batch_limit
        trace.append((t, d.replicas, good, d.reason))
    return trace


def test_converges_after_a_load_step() -> None:
    trace = run()
    # Within 3 minutes of the step the SLO holds for the rest of the high phase.
    assert all(good for t, _, good, _ in trace if 780 <= t < 1800), \
        [(t, n, r) for t, n, g, r in trace if 780 <= t < 1800 and not g]
    # Replicas settle: no change in the last 10 minutes of the high phase.
    assert len({n for t, n, _, _ in trace if 1200 <= t < 1800}) == 1


def test_does_not_flap_or_overshoot() -> None:
    trace = run()
    counts = [n for _, n, _, _ in trace]
    moves = [b - a for a, b in itertools.pairwise(counts) if b != a]
    reversals = sum(1 for a, b in itertools.pairwise(moves) if (a > 0) != (b > 0))
    assert reversals <= 1, moves  # one way up, one way down
    mu = rate_at_batch(DEFAULT_STEP_TIMES.scaled(TRUE_SPEED), 64, PROMPT, OUTPUT)
    assert max(counts) <= math.ceil(60.0 / mu) + 2, counts  # no several-fold overshoot


def test_scales_in_after_the_window_and_not_before() -> None:
    trace = run()
    level = next(n for t, n, _, _ in trace if t == 1800 - CYCLE)  # just before the drop
    assert all(n == level for t, n, _, _ in trace if 1800 <= t < 1800 + 300)
    end = trace[-1][1]
    assert end < level and end <= 2
