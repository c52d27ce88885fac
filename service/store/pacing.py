"""When a group commit should happen: at once, or at the next commit slot.

Waiting for a slot lets the writes of independent callers share one
transaction (the store's main cost), but it only slows down a caller that
waits for each commit before writing again, as a lone client does. The pacer
tells the cases apart from what the batches held:

- Writes commit at once (on the next loop iteration) while batches hold one
  write each. Two or more writes in one batch mean independent writers: from
  then on, writes wait for the next slot (`interval` after the last commit).
- A batch that waited the whole slot counts the writers at work (the largest
  of the last three such counts, so one lull does not shrink the batches).
  When they are few (at most `few`), batches close as soon as that many
  writes are queued, for `measure_every`, and then a whole slot is waited
  again to count afresh: two callers do not each wait 5 ms for a third that
  never comes, while thirty get batches as large as the slot allows.
- A batch that waited the whole slot and still held one write means a lone
  caller: back to committing at once; a slot is tried again (a probe) only
  after `probe_every`, to notice when others join. After slots that counted
  more than two writers, it takes `lone_slots` such batches in a row: a busy
  loop has lulls, and committing its writes one by one until the next probe
  cost it a third of its commits' worth of throughput. (With two writers or
  fewer, committing at once is what serves them best.)
- Counts of three writers or more alternate between a slot of `interval` and
  one twice as long. When the long one counts at least half again as many
  writers, the writers are more than a slot can gather: the loop is
  the bottleneck and they queue in front of it. Slots are then twice as long
  (until a pair of counts says otherwise), so that each commit, whose fixed
  cost is then paid out of everyone's throughput, serves twice as many. The
  loop does not idle for it: writes that keep arriving through the long slot
  are work it was doing all along. A fixed set of callers (all of them already
  waiting in the batch) counts the same in both and keeps the short slot.
"""

from __future__ import annotations

DEFAULT_COMMIT_INTERVAL = 0.005  # seconds between group commits under load (config: ms)
# Two writers or fewer are served best by committing at once, and never outnumber a slot.
_PAIR = 2


class CommitPacer:
    """The decisions of one store's writer; times are the event loop's clock."""

    def __init__(
        self,
        interval: float,
        *,
        few: int = 16,
        measure_every: float = 0.1,
        probe_every: float = 1.0,
        lone_slots: int = 3,
    ) -> None:
        self.interval = max(0.0, interval)
        self.few = few
        self.lone_slots = lone_slots
        self._lone_run = 0  # whole slots in a row that gathered a single write
        self.measure_every = measure_every
        self.probe_every = probe_every
        self.grouping = False  # writes wait for the slot
        self.last_commit = float("-inf")
        self._counts: tuple[int, ...] = ()  # sizes of the last batches that waited a whole slot
        self._writers = 0  # writers at work, as those batches counted them
        self._counted_until = float("-inf")
        self._next_probe = float("-inf")
        self._waiting = False  # the batch being gathered waits for the slot
        self._closing_early = False  # ... and may close once `_writers` writes are in
        self.stretch = 1  # slot length in intervals: 2 while the writers outnumber a slot
        self._batch_stretch = 1  # the slot length of the batch being gathered
        self._long_count_next = False  # the next count uses a doubled slot
        self._short_count = 0  # the last counts in a single and a double slot
        self._long_count = 0

    def on_write(self, now: float, pending: int, scheduled: bool) -> float | None:
        """A write was queued (`pending` writes now). Returns when the batch should
        commit (seconds from now; 0 = the next loop iteration), or None to keep the
        current schedule."""
        if not scheduled:
            counting = now >= self._counted_until
            if not self.grouping:
                self._batch_stretch = 1  # a probe for other writers: one slot
            elif counting:
                self._batch_stretch = 2 if self._long_count_next else 1
            else:
                self._batch_stretch = self.stretch
            wait = self.last_commit + self.interval * self._batch_stretch - now
            self._waiting = wait > 0 and (self.grouping or now >= self._next_probe)
            self._closing_early = self._waiting and not counting and self._writers <= self.few
            if not self._waiting:
                return 0.0
            if self._closing_early and pending >= self._writers:
                self._waiting = False
                return 0.0
            return wait
        if self._waiting and self._closing_early and pending >= self._writers:
            self._waiting = False  # every writer of the last count is in
            return 0.0
        return None

    def on_commit(self, now: float, size: int) -> None:
        """A batch of `size` writes committed at `now`."""
        waited_whole_slot = self._waiting
        self._waiting = False
        self.last_commit = now
        if waited_whole_slot:
            self._counts = (*self._counts[-2:], size)
            self._writers = max(self._counts)
            self._compare_slots(size)
            self._counted_until = now + self.measure_every
            self._lone_run = self._lone_run + 1 if size <= 1 else 0
            if size <= 1 and (
                self._lone_run >= self.lone_slots or self._writers <= _PAIR or not self.grouping
            ):
                # A lone caller (or a probe that found nobody): the waits gathered nothing.
                self.grouping = False
                self._lone_run = 0
                self._next_probe = now + self.probe_every
                return
        if size > 1 and not self.grouping:
            # Independent writers appeared: wait whole slots until they are counted.
            self.grouping = True
            self._counts, self._counted_until = (), float("-inf")
            self.stretch, self._long_count_next, self._short_count, self._long_count = (
                1,
                False,
                0,
                0,
            )

    def _compare_slots(self, size: int) -> None:
        """Record a whole slot's count by its length; a long count that exceeds the
        short one by half (the writers outnumber a slot) doubles the slot."""
        if self._batch_stretch == 2:
            self._long_count = size
        else:
            self._short_count = size
        self._long_count_next = self._batch_stretch == 1 and size > _PAIR
        if self._short_count <= _PAIR:
            self.stretch = 1
        elif self._long_count:
            self.stretch = 2 if self._long_count * 2 >= self._short_count * 3 else 1
