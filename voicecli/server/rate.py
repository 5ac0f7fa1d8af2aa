"""How fast a client's messages are read: a token bucket per connection and one per
client address, so that a flood of messages, however many connections it comes on,
costs the server a bounded share of its CPU; the model's share stays with the
listeners. A client past its rate is simply read later: its sends back up in TCP, and
nothing it sent is dropped. A message the server refuses costs more than one it takes
(``Limits.refusal_cost``): a client that sends nonsense, or asks for what it cannot
have, is read that much more slowly, and a well-behaved one at its full rate."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict


class Bucket:
    """``rate`` messages a second, ``burst`` at once. A message past them waits its turn:
    the wait is owed in order, so a client that sends now waits behind those already
    waiting, never forever."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._at = time.monotonic()

    def delay(self, cost: float = 1.0) -> float:
        """Take ``cost`` messages' tokens; how long to wait before reading the next."""
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= cost
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class MessageRates:
    """The buckets of the client addresses seen lately (a bounded number of them)."""

    MAX_ADDRESSES = 4096

    def __init__(self, per_address: float, burst: float) -> None:
        self.per_address = per_address
        self.burst = burst
        self._buckets: OrderedDict[str, Bucket] = OrderedDict()

    def of(self, address: str) -> Bucket:
        bucket = self._buckets.get(address)
        if bucket is None:
            bucket = self._buckets[address] = Bucket(self.per_address, self.burst)
            if len(self._buckets) > self.MAX_ADDRESSES:
                self._buckets.popitem(last=False)  # the address heard from least lately
        self._buckets.move_to_end(address)
        return bucket


class Pace:
    """The reads of one client's messages: each waits until every bucket lets it be
    read, and the read after a message the server refused costs ``refusal_cost``."""

    def __init__(self, *buckets: Bucket, refusal_cost: float) -> None:
        self._buckets = buckets
        self._refusal_cost = refusal_cost
        self._cost = 1.0

    async def wait(self) -> None:
        """Wait until the next message may be read."""
        wait = max(bucket.delay(self._cost) for bucket in self._buckets)
        self._cost = 1.0
        if wait > 0:
            await asyncio.sleep(wait)

    def refused(self) -> None:
        """The message just read was refused."""
        self._cost = self._refusal_cost
