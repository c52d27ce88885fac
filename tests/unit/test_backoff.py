"""ConnectionBackoff (gateway.limits.backoff): how long a connection is not read after a refusal.
The clock and the random factor are given, so the figures are exact."""

from __future__ import annotations

import random
import tracemalloc

import pytest

from gateway.limits.backoff import (
    BASE_PAUSE_SECONDS,
    MAX_PAUSE_SECONDS,
    STREAK_SECONDS,
    ConnectionBackoff,
    retry_after,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Fixed(random.Random):
    """A "random" factor that is always `value`."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def uniform(self, a: float, b: float) -> float:
        assert (a, b) == (1.0, 2.0)
        return self.value


def test_no_refusal_no_pause():
    backoff = ConnectionBackoff(Fixed(1.0), Clock())
    assert backoff.pause() == 0.0
    backoff.refused(0.0)  # a 429 without a usable hint
    assert backoff.pause() == 0.0


def test_the_pause_is_the_hint_times_the_factor_and_grows_while_refusals_keep_coming():
    clock = Clock()
    backoff = ConnectionBackoff(Fixed(1.5), clock)
    backoff.refused(0.4)
    assert backoff.pause() == pytest.approx(0.6)  # a hint below the base is kept
    assert backoff.pause() == 0.0  # the hint belongs to one response
    pauses = []
    for _ in range(8):
        clock.now += 1.0
        backoff.refused(7.0)  # capped at the base, then doubled per refusal in the streak
        pauses.append(backoff.pause())
        backoff.pause()  # an answer in between (not a refusal) does not end the streak
    base = BASE_PAUSE_SECONDS * 1.5
    assert pauses[:3] == pytest.approx([2 * base, 4 * base, 8 * base])
    assert max(pauses) == pytest.approx(MAX_PAUSE_SECONDS * 1.5)  # however long it goes on


def test_a_refusal_long_after_the_last_starts_over():
    clock = Clock()
    backoff = ConnectionBackoff(Fixed(1.0), clock)
    for _ in range(4):
        backoff.refused(1.0)
        first = backoff.pause()
    assert first == pytest.approx(8 * BASE_PAUSE_SECONDS)
    clock.now += STREAK_SECONDS + 1
    backoff.refused(1.0)
    assert backoff.pause() == pytest.approx(BASE_PAUSE_SECONDS)


def test_the_random_factor_spreads_a_herd_between_one_and_two_hints():
    pauses = []
    for seed in range(200):
        backoff = ConnectionBackoff(random.Random(seed), Clock())
        backoff.refused(1.0)
        pauses.append(backoff.pause())
    assert all(1.0 <= p <= 2.0 for p in pauses)
    assert max(pauses) - min(pauses) > 0.8  # spread over the range, not one moment


def test_retry_after_reads_seconds_and_ignores_what_it_cannot_read():
    assert retry_after([(b"content-type", b"x"), (b"Retry-After", b"3")]) == 3.0
    assert retry_after([(b"retry-after", b"Fri, 04 Dec 2026 03:00:00 GMT")]) == 0.0
    assert retry_after([]) == 0.0


def test_a_connections_backoff_is_small():
    """Every open connection (an SSE stream is one) holds one: no random generator of its
    own (2.5 KiB of state each)."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [ConnectionBackoff() for _ in range(100)]
        per_connection = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert per_connection < 300, f"{per_connection:.0f} bytes per connection"
