"""The group-commit pacer (service.store.pacing), driven with a made-up clock."""

from __future__ import annotations

from service.store.pacing import CommitPacer

SLOT = 0.003


def commit_one_at_a_time(pacer: CommitPacer, now: float, count: int, gap: float = 0.001) -> float:
    """A lone caller: writes, waits for its commit, writes again `gap` later."""
    for _ in range(count):
        when = pacer.on_write(now, 1, scheduled=False)
        now += when
        pacer.on_commit(now, 1)
        now += gap
    return now


def test_a_lone_caller_commits_at_once_except_for_a_rare_probe():
    pacer = CommitPacer(SLOT, probe_every=1.0)
    waits = []
    now = 10.0
    for _ in range(3000):  # ~3 s of one caller writing every millisecond
        when = pacer.on_write(now, 1, scheduled=False)
        waits.append(when)
        now += when
        pacer.on_commit(now, 1)
        now += 0.001
    slow = [w for w in waits if w > 0]
    assert len(slow) <= 4, slow  # one probe per second, which finds nobody else
    assert not pacer.grouping


def test_independent_writers_switch_to_the_slot_and_stay():
    pacer = CommitPacer(SLOT)
    now = commit_one_at_a_time(pacer, 10.0, 5)
    assert pacer.on_write(now, 1, scheduled=False) == 0.0  # at once...
    assert pacer.on_write(now, 2, scheduled=True) is None  # a second caller joins the batch
    pacer.on_commit(now, 2)
    assert pacer.grouping  # two writes in one batch: independent writers
    for _ in range(10):  # thirty callers
        now += 0.0005
        wait = pacer.on_write(now, 1, scheduled=False)
        assert 0 < wait <= 2 * SLOT  # every other count of the writers takes a doubled slot
        for queued in range(2, 31):
            assert pacer.on_write(now, queued, scheduled=True) is None  # thirty is not "few"
        now += wait
        pacer.on_commit(now, 30)
    assert pacer.grouping
    assert pacer.stretch == 1  # the same thirty in a long slot as in a short one


def test_few_writers_close_the_batch_when_all_are_in():
    pacer = CommitPacer(SLOT, few=4, measure_every=0.1)
    now = 10.0
    pacer.on_write(now, 1, scheduled=False)
    pacer.on_write(now, 2, scheduled=True)
    pacer.on_commit(now, 2)  # grouping now
    now += 0.001
    wait = pacer.on_write(now, 1, scheduled=False)
    assert wait > 0
    pacer.on_write(now, 2, scheduled=True)
    now += wait
    pacer.on_commit(now, 2)  # waited the whole slot and counted two writers
    now += 0.0005
    assert pacer.on_write(now, 1, scheduled=False) > 0  # one of two: wait for the other
    assert pacer.on_write(now, 2, scheduled=True) == 0.0  # both in: commit now
    pacer.on_commit(now, 2)
    now += 0.2  # the count is old: the next batch waits the whole slot to count again
    pacer.on_commit(now, 2)
    now += 0.0005
    assert pacer.on_write(now, 1, scheduled=False) > 0
    assert pacer.on_write(now, 2, scheduled=True) is None


def start_grouping(pacer: CommitPacer, now: float) -> float:
    pacer.on_write(now, 1, scheduled=False)
    pacer.on_write(now, 2, scheduled=True)
    pacer.on_commit(now, 2)
    assert pacer.grouping
    return now


def wait_one_slot(pacer: CommitPacer, now: float, writes: int) -> float:
    """Writes arrive 1 ms after the last commit; the batch waits its whole slot."""
    now += 0.001
    wait = pacer.on_write(now, 1, scheduled=False)
    assert wait > 0
    for queued in range(2, writes + 1):
        assert pacer.on_write(now, queued, scheduled=True) is None
    now += wait
    pacer.on_commit(now, writes)
    return now


def test_a_slot_with_one_write_after_two_writers_goes_back_to_at_once():
    pacer = CommitPacer(SLOT, probe_every=1.0, few=0, lone_slots=3)
    now = start_grouping(pacer, 10.0)
    now = wait_one_slot(pacer, now, 2)
    assert pacer.grouping
    now = wait_one_slot(pacer, now, 1)  # two callers at most: at once serves them best
    assert not pacer.grouping


def test_after_many_writers_slots_with_one_write_go_back_to_at_once_when_in_a_row():
    pacer = CommitPacer(SLOT, probe_every=1.0, few=0, lone_slots=3)
    now = start_grouping(pacer, 10.0)
    now = wait_one_slot(pacer, now, 6)
    for _ in range(2):
        now = wait_one_slot(pacer, now, 1)  # the others are gone...
        assert pacer.grouping
    now = wait_one_slot(pacer, now, 1)  # ... for three slots in a row
    assert not pacer.grouping
    now += 0.001
    assert pacer.on_write(now, 1, scheduled=False) == 0.0


def test_a_lull_among_busy_slots_keeps_grouping():
    pacer = CommitPacer(SLOT, probe_every=1.0, few=0, lone_slots=3)
    now = start_grouping(pacer, 10.0)
    for writes in [5, 1, 4, 1, 1, 6, 1, 1, 3]:  # never three single-write slots in a row
        now = wait_one_slot(pacer, now, writes)
        assert pacer.grouping, writes


def test_an_idle_store_commits_at_once():
    pacer = CommitPacer(SLOT)
    pacer.on_write(10.0, 1, scheduled=False)
    pacer.on_write(10.0, 5, scheduled=True)
    pacer.on_commit(10.0, 5)
    assert pacer.grouping
    assert pacer.on_write(11.0, 1, scheduled=False) == 0.0  # the slot is long past


def test_interval_zero_never_waits():
    pacer = CommitPacer(0.0)
    now = 10.0
    for size in (1, 5, 1, 9):
        assert pacer.on_write(now, 1, scheduled=False) == 0.0
        pacer.on_commit(now, size)
        now += 0.0001


def gather(
    pacer: CommitPacer, now: float, every: float | None, burst: int = 1
) -> tuple[float, float]:
    """One batch: `burst` writes at `now`, then one every `every` seconds (None: no more)
    until the pacer's deadline. Returns (commit time, the wait the pacer asked for)."""
    wait = pacer.on_write(now, 1, scheduled=False)
    assert wait is not None
    deadline, queued = now + wait, 1
    for _ in range(burst - 1):
        queued += 1
        pacer.on_write(now, queued, scheduled=True)
    while every is not None and now + every < deadline:
        now += every
        queued += 1
        pacer.on_write(now, queued, scheduled=True)
    pacer.on_commit(deadline, queued)
    return deadline, wait


def test_writers_that_outnumber_a_slot_double_it_and_a_fixed_set_does_not():
    pacer = CommitPacer(SLOT, measure_every=0.02)
    now = start_grouping(pacer, 10.0)
    waits = []
    for _ in range(100):  # a write every 0.5 ms, for as long as the slot lasts: a busy loop
        now, wait = gather(pacer, now + 0.0002, 0.0005)
        waits.append(wait)
    assert pacer.stretch == 2
    assert sum(w > SLOT for w in waits[-50:]) >= 40  # most batches gather for two slots
    for _ in range(100):  # four callers, all in at once, then nobody until the commit
        now, wait = gather(pacer, now + 0.0002, None, burst=4)
    assert pacer.stretch == 1


def test_two_writers_never_wait_a_doubled_slot():
    pacer = CommitPacer(SLOT, measure_every=0.005)
    now = start_grouping(pacer, 10.0)
    for _ in range(50):
        now, wait = gather(pacer, now + 0.0002, None, burst=2)
        assert wait <= SLOT
    assert pacer.stretch == 1
