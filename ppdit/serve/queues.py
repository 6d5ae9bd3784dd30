"""Bounded queues with backpressure (D_IN, D_OUT), and the idempotent-receive filter.

A queue that can grow without bound hides a slow consumer until memory runs out. Every queue
here has a capacity: ``put`` blocks (with a timeout) when it is full, ``offer`` says "full"
instead of blocking, and every change of depth is recorded on the tracer, so a timeline shows
where work piles up.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from ppdit.runtime.observe.trace import Tracer


class QueueFull(RuntimeError):
    """A bounded queue stayed full for longer than the producer was willing to wait."""


class QueueEmpty(RuntimeError):
    """Nothing arrived in a bounded queue within the consumer's timeout."""


class BoundedQueue:
    """A thread-safe FIFO of at most ``capacity`` items; depth traced as a counter."""

    def __init__(self, name: str, capacity: int, tracer: Tracer | None = None):
        if capacity < 1:
            raise ValueError(f"queue {name!r}: capacity={capacity} must be >= 1")
        self.name, self.capacity, self.tracer = name, capacity, tracer
        self._items: deque = deque()
        self._cond = threading.Condition()
        self.max_depth = 0
        self.blocked_s = 0.0  # total time producers waited for room: the backpressure felt

    def __len__(self) -> int:
        with self._cond:
            return len(self._items)

    def put(self, item: Any, timeout_s: float = 30.0) -> None:
        """Add ``item``, waiting for room; ``QueueFull`` after ``timeout_s``."""
        start = time.monotonic()
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._items) < self.capacity, timeout_s):
                raise QueueFull(f"queue {self.name!r} stayed full ({self.capacity} items) for "
                                f"{timeout_s:g} s: its consumer is too slow or stopped")
            self.blocked_s += time.monotonic() - start
            self._items.append(item)
            self._changed()

    def offer(self, item: Any) -> bool:
        """Add ``item`` if there is room; return False ("full") instead of waiting."""
        with self._cond:
            if len(self._items) >= self.capacity:
                return False
            self._items.append(item)
            self._changed()
            return True

    def get(self, timeout_s: float = 30.0) -> Any:
        """Take the oldest item, waiting for one; ``QueueEmpty`` after ``timeout_s``."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._items) > 0, timeout_s):
                raise QueueEmpty(f"queue {self.name!r}: nothing arrived within {timeout_s:g} s")
            item = self._items.popleft()
            self._changed()
            return item

    def remove(self, match) -> int:
        """Take out the items ``match`` accepts, keep the rest in order; return how many."""
        with self._cond:
            kept = [x for x in self._items if not match(x)]
            removed = len(self._items) - len(kept)
            self._items = deque(kept)
            self._changed()
            return removed

    def _changed(self) -> None:
        depth = len(self._items)
        self.max_depth = max(self.max_depth, depth)
        if self.tracer is not None:
            self.tracer.counter(f"{self.name} depth", depth)
        self._cond.notify_all()


class Deduplicator:
    """Idempotent receive: the first delivery of a key passes, replays and duplicates do not.

    Keys are (request, epoch, seq). Keys of epochs before ``forget_before`` are dropped from
    memory, so the set stays as small as the current epoch's traffic.
    """

    def __init__(self):
        self._seen: set[tuple[int, int, int]] = set()
        self.duplicates = 0

    def first_time(self, key: tuple[int, int, int]) -> bool:
        """True the first time ``key`` is seen; counts and rejects every repeat."""
        if key in self._seen:
            self.duplicates += 1
            return False
        self._seen.add(key)
        return True

    def forget_before(self, epoch: int) -> None:
        """A hard cut moved to ``epoch``: older keys can never be valid again."""
        self._seen = {k for k in self._seen if k[1] >= epoch}
