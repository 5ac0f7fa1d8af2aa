"""A single-producer, single-consumer ring buffer of float32 samples.

The synthesizer thread writes; the audio callback reads. One short lock
guards the indices: the callback holds it only for a copy of one block, and
never waits on anything, so it cannot stall the device.
"""

from __future__ import annotations

import threading

import numpy as np

from voicecli.cancel import CancelToken


class RingBuffer:
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._buf = np.zeros(capacity, dtype=np.float32)
        self._lock = threading.Lock()
        self._space = threading.Condition(self._lock)
        self._write_pos = 0  # absolute count of samples ever written
        self._read_pos = 0  # absolute count of samples ever read or dropped
        self._generation = 0  # bumped by clear(), so a blocked writer abandons its chunk

    @property
    def available(self) -> int:
        with self._lock:
            return self._write_pos - self._read_pos

    @property
    def write_pos(self) -> int:
        with self._lock:
            return self._write_pos

    @property
    def read_pos(self) -> int:
        with self._lock:
            return self._read_pos

    def write(self, samples: np.ndarray, cancel: CancelToken | None = None) -> int:
        """Copy ``samples`` in, blocking while the buffer is full (backpressure).

        Returns how many samples went in: fewer than given if ``cancel`` fired or
        ``clear()`` ran while waiting.
        """
        data = np.asarray(samples, dtype=np.float32).reshape(-1)
        done = 0
        with self._lock:
            generation = self._generation
            while done < len(data):
                if cancel is not None and cancel.cancelled:
                    break
                free = self.capacity - (self._write_pos - self._read_pos)
                if free == 0:
                    # Timed wait: cancel is polled, as its setter cannot notify us.
                    self._space.wait(timeout=0.05)
                    if self._generation != generation:
                        break
                    continue
                n = min(free, len(data) - done)
                self._copy_in(data[done : done + n])
                done += n
        return done

    def _copy_in(self, data: np.ndarray) -> None:
        start = self._write_pos % self.capacity
        first = min(len(data), self.capacity - start)
        self._buf[start : start + first] = data[:first]
        if first < len(data):
            self._buf[: len(data) - first] = data[first:]
        self._write_pos += len(data)

    def read_into(self, out: np.ndarray) -> tuple[int, int]:
        """Fill ``out`` from the buffer without blocking.

        Returns (samples copied, absolute read position before the copy). The
        caller zero-fills the rest: that is an underrun if audio was expected.
        """
        with self._lock:
            before = self._read_pos
            n = min(len(out), self._write_pos - self._read_pos)
            start = before % self.capacity
            first = min(n, self.capacity - start)
            out[:first] = self._buf[start : start + first]
            if first < n:
                out[first:n] = self._buf[: n - first]
            self._read_pos += n
            if n:
                self._space.notify()
        return n, before

    def skip_to(self, position: int) -> int:
        """Drop unread samples before absolute ``position``; returns how many were dropped."""
        with self._lock:
            target = min(max(position, self._read_pos), self._write_pos)
            dropped = target - self._read_pos
            self._read_pos = target
            if dropped:
                self._space.notify_all()
        return dropped

    def clear(self) -> int:
        """Drop everything not yet read; returns how many samples were dropped."""
        with self._lock:
            dropped = self._write_pos - self._read_pos
            self._read_pos = self._write_pos
            self._generation += 1
            self._space.notify_all()
        return dropped
