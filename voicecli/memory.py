"""Give the memory a long-lived process no longer uses back to the system.

Synthesis allocates and frees activations of every size, and glibc keeps what is freed in
its heaps: on the real Kokoro an engine grew to several times its size over a few long
texts and stayed there idle, and ``malloc_trim(0)`` takes that back in a fraction of a
second. Capping glibc's mmap threshold instead keeps it flat but slows synthesis down, so
the engine trims once it has been idle a moment (``Limits.release_after``;
docs/engine.md has the figures).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _trim() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


def release_free_memory() -> bool:
    """Return the C heap's free pages to the system; False where that cannot be done."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
