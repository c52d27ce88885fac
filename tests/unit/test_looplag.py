"""The event-loop lag meter (service/ops/looplag.py) and the admission step that refuses new
streams on it (service/calls/admission.py `LagGate`): with a fake clock for the window's
arithmetic, and on a real loop blocked on purpose for what it measures."""

from __future__ import annotations

import asyncio
import time

import pytest

from service.calls.admission import LagGate, admission
from service.calls.record import Call
from service.ops.looplag import LoopLag
from service.protocol.errors import OverloadedError
from service.protocol.params import CallContext


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def meter_at(clock: Clock, window: float = 5.0) -> LoopLag:
    return LoopLag(interval=0.1, window=window, clock=clock)


def wake(meter: LoopLag, clock: Clock, late: float) -> None:
    """The meter's next wake-up comes `late` seconds after it was due."""
    due = clock.now + meter.interval
    meter.expect(due)
    clock.now = due + late
    meter.observe(clock.now)
    meter.expect(clock.now + meter.interval)


def test_a_punctual_loop_reads_no_lag():
    clock = Clock()
    meter = meter_at(clock)
    for _ in range(20):
        wake(meter, clock, 0.0)
    assert meter.lag_ms() == 0.0


def test_the_longest_delay_of_the_window_holds_until_it_leaves_it():
    clock = Clock()
    meter = meter_at(clock, window=5.0)
    wake(meter, clock, 0.8)
    for _ in range(10):  # punctual wake-ups after it do not hide it
        wake(meter, clock, 0.001)
    assert meter.lag_ms() == pytest.approx(800.0)
    wake(meter, clock, 0.3)  # a smaller one later does not replace it
    assert meter.lag_ms() == pytest.approx(800.0)
    clock.now += 4.0  # the 0.8 s delay is now more than 5 s old; the 0.3 s one is not
    meter.expect(clock.now + 0.1)
    assert meter.lag_ms() == pytest.approx(300.0)
    clock.now += 5.0
    meter.expect(clock.now + 0.1)
    assert meter.lag_ms() == 0.0


def test_a_wake_up_overdue_now_counts_before_it_happens():
    clock = Clock()
    meter = meter_at(clock)
    wake(meter, clock, 0.0)
    clock.now += meter.interval + 2.0  # the loop is still busy: the timer has not run
    assert meter.lag_ms() == pytest.approx(2000.0)


def test_the_retry_hint_is_when_the_delay_leaves_the_window():
    clock = Clock()
    meter = meter_at(clock, window=5.0)
    assert meter.retry_after() == 5.0  # nothing recorded: a full window
    wake(meter, clock, 2.0)
    clock.now += 1.5
    assert meter.retry_after() == 4.0  # 3.5 s left, rounded up
    clock.now += 3.4
    assert meter.retry_after() == 1.0  # never less than a second


async def test_a_blocked_loop_is_measured_at_least_as_long_as_it_was_blocked():
    meter = LoopLag(interval=0.05, window=30.0)
    meter.start()
    try:
        await asyncio.sleep(0.12)  # a few punctual wake-ups
        blocked = 0.5
        loop = asyncio.get_running_loop()
        done = loop.create_future()

        def block() -> None:
            time.sleep(blocked)  # a callback that blocks the loop (as a careless agent would)
            done.set_result(None)

        loop.call_soon(block)
        await done
        for _ in range(3):  # the late wake-up runs, then punctual ones again
            await asyncio.sleep(meter.interval)
        # the timer was due at most one interval after the block began
        assert meter.lag_ms() >= (blocked - meter.interval) * 1000
    finally:
        meter.stop()


class Lagging:
    """A meter that reads what the test says."""

    def __init__(self, lag_ms: float) -> None:
        self.lag = lag_ms

    def lag_ms(self) -> float:
        return self.lag

    def retry_after(self) -> float:
        return 3.0


async def test_the_gate_refuses_new_streams_only_and_only_past_the_limit():
    meter = Lagging(1500.0)
    gate = LagGate(meter, 1000.0)  # type: ignore[arg-type]
    context = CallContext(metadata={})
    unary = Call("grpc", "SendMessage")
    await gate.before(unary, context, None)  # a unary call passes however late the loop
    stream = Call("grpc", "SendStreamingMessage")
    stream.stream = True
    with pytest.raises(OverloadedError) as refused:
        await gate.before(stream, context, None)
    err = refused.value
    assert err.grpc_status == "RESOURCE_EXHAUSTED" and err.http_status == 429
    assert err.metadata == {"setting": "stream_refusal_lag_ms", "limit": "1000"}
    assert err.retry_after == 3.0 and "1500 ms late" in err.message
    meter.lag = 1000.0  # at the limit, not past it
    await gate.before(stream, context, None)


def test_the_gate_is_left_out_when_refusal_is_off():
    meter = LoopLag()
    assert not any(isinstance(s, LagGate) for s in admission(None, loop_lag=meter))
    steps = admission(None, loop_lag=meter, stream_refusal_lag_ms=250.0)
    assert [type(s) for s in steps][:1] == [LagGate]
