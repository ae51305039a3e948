"""Weighted fair admission (stride scheduling): weights, the queue bound, tie order, the
returning tenant's pass, and waiters cancelled before or while they are granted."""

from __future__ import annotations

import asyncio

import pytest

from slo_runtime.admission import DEFAULT_MAX_QUEUE, FairAdmission, QueueFull
from slo_runtime.gateway import GatewayConfig
from tests.runtime.rt_support import wait_until


async def drain(adm: FairAdmission, tenants: list[str], grants: int) -> list[str]:
    """Queue one waiter per entry of ``tenants`` (in order) behind a held slot, then free
    ``grants`` slots one by one; return the tenants in the order they were admitted."""
    order: list[str] = []

    async def one(t: str) -> None:
        await adm.acquire(t)
        order.append(t)

    tasks = []
    for t in tenants:
        tasks.append(asyncio.create_task(one(t)))
        await asyncio.sleep(0)                 # enqueue in this exact order
    await wait_until(lambda: adm.queued() == len(tenants))
    for _ in range(grants):
        adm.release()
        await asyncio.sleep(0)
    await wait_until(lambda: len(order) == grants)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return order


async def test_a_tenant_without_a_weight_gets_weight_one() -> None:
    adm = FairAdmission(limit=1, weights={"heavy": 2.0})
    assert adm.try_acquire("heavy")
    order = await drain(adm, ["heavy"] * 20 + ["other"] * 20, grants=30)
    assert order.count("heavy") == 20
    assert order.count("other") == 10


async def test_queue_bound_refuses_the_waiter_beyond_it() -> None:
    adm = FairAdmission(limit=1, max_queue=2)
    assert adm.try_acquire("t")
    waiters = [asyncio.create_task(adm.acquire("t")) for _ in range(2)]
    await wait_until(lambda: adm.queued("t") == 2)
    with pytest.raises(QueueFull):
        await adm.acquire("t")
    assert adm.queued("t") == 2
    for w in waiters:
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)


async def test_default_queue_bound_is_the_gateways() -> None:
    assert GatewayConfig().max_queue_per_tenant == DEFAULT_MAX_QUEUE == 4096
    adm = FairAdmission(limit=1)
    assert adm.try_acquire("t")
    waiters = [asyncio.create_task(adm.acquire("t")) for _ in range(DEFAULT_MAX_QUEUE)]
    await wait_until(lambda: adm.queued("t") == DEFAULT_MAX_QUEUE)
    with pytest.raises(QueueFull):
        await adm.acquire("t")
    for w in waiters:
        w.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)


def test_an_unknown_tenant_has_nothing_queued() -> None:
    adm = FairAdmission(limit=1)
    assert adm.queued("nobody") == 0
    assert adm.queued() == 0


async def test_a_returning_tenant_starts_at_the_current_virtual_time() -> None:
    # a and b alternate (equal weights, ties in name order); c arrives with no queue after
    # three grants. Its pass starts at the virtual time, equal to b's, so b (the earlier
    # name) still goes before it; a pass left at 0 would put c ahead of b.
    adm = FairAdmission(limit=1)
    assert adm.try_acquire("held")
    order: list[str] = []

    async def one(t: str) -> None:
        await adm.acquire(t)
        order.append(t)

    async def grant(n: int) -> None:
        want = len(order) + n
        for _ in range(n):
            adm.release()
            await asyncio.sleep(0)
        await wait_until(lambda: len(order) == want)

    tasks = []
    for t in ["a", "b", "a", "b", "a", "b"]:
        tasks.append(asyncio.create_task(one(t)))
        await asyncio.sleep(0)
    await wait_until(lambda: adm.queued() == 6)
    await grant(3)
    tasks.append(asyncio.create_task(one("c")))
    await wait_until(lambda: adm.queued("c") == 1)
    await grant(3)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert order == ["a", "b", "a", "b", "c", "a"]


async def test_a_grant_racing_the_waiters_cancellation_gives_the_slot_back() -> None:
    adm = FairAdmission(limit=1)
    assert adm.try_acquire("holder")
    waiter = asyncio.create_task(adm.acquire("w"))
    await wait_until(lambda: adm.queued("w") == 1)
    adm.release()              # grants w's future ...
    waiter.cancel()            # ... and w is cancelled before it runs again
    await asyncio.gather(waiter, return_exceptions=True)
    assert waiter.cancelled()
    assert adm.in_flight == 0  # the abandoned grant was released, not leaked
    assert adm.try_acquire("next")


async def test_cancelling_a_waiter_frees_nothing_the_holder_still_has() -> None:
    adm = FairAdmission(limit=1)
    assert adm.try_acquire("holder")
    waiter = asyncio.create_task(adm.acquire("w"))
    await wait_until(lambda: adm.queued("w") == 1)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert adm.in_flight == 1
    assert adm.queued() == 0
    assert not adm.try_acquire("other")


async def test_cancelling_a_waiter_admits_no_one_else_while_the_holder_runs() -> None:
    adm = FairAdmission(limit=1)
    assert adm.try_acquire("holder")
    other = asyncio.create_task(adm.acquire("a"))
    await wait_until(lambda: adm.queued("a") == 1)
    waiter = asyncio.create_task(adm.acquire("w"))
    await wait_until(lambda: adm.queued("w") == 1)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    await asyncio.sleep(0)
    assert not other.done()            # the holder still runs: no slot to give
    assert (adm.in_flight, adm.queued("a"), adm.queued("w")) == (1, 1, 0)
    adm.release()
    await asyncio.wait_for(other, 1)   # the holder's slot goes to the waiter left
    assert adm.in_flight == 1


async def test_fair_admission_grants_in_weight_ratio_while_both_backlogged() -> None:
    adm = FairAdmission(limit=1, weights={"a": 3.0, "b": 1.0})
    assert adm.try_acquire("a")
    order: list[str] = []

    async def one(t: str) -> None:
        await adm.acquire(t)
        order.append(t)

    tasks = [asyncio.create_task(one(t)) for t in ["a"] * 30 + ["b"] * 30]
    await wait_until(lambda: adm.queued() == 60)
    for _ in range(40):
        adm.release()
        await asyncio.sleep(0)
    await wait_until(lambda: len(order) == 40)
    assert order[:40].count("a") == 30
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_fair_admission_cancelled_waiter_leaves_queue_and_slot_accounting() -> None:
    adm = FairAdmission(limit=1)
    assert adm.try_acquire("x")
    waiter = asyncio.create_task(adm.acquire("x"))
    await wait_until(lambda: adm.queued("x") == 1)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert adm.queued() == 0
    adm.release()
    assert adm.in_flight == 0
