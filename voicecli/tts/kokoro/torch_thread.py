"""The one thread that runs torch in this process.

torch's CPU wheels parallelise with GNU OpenMP, which gives each thread that enters a
parallel region a team of worker threads of its own, kept for as long as that thread
lives. A model loaded on the main thread and run on another makes two teams: more OpenMP
threads than a 2-core machine has cores. libgomp then stops spinning at its barriers and
sleeps in the kernel after a hundred spins, at each of the thousands of barriers of a
forward pass, and a first unit takes about a third longer (docs/streaming.md). So every
torch computation voicecli makes (loading the
model and voices, the text stages, the generator) runs here, one at a time, and its
callers wait for it.

Its team is fitted to the cores nobody else wants before each piece of work
(``cpu_share``), unless ``configure`` fixed its size.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from voicecli.tts.kokoro.cpu_share import CpuShare

P = ParamSpec("P")
T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_ident: int | None = None
_fixed: int | None = None  # the team size ``configure`` asked for
_share: CpuShare | None = None  # built at the next piece of work
_default = 0  # torch's own team size (OMP_NUM_THREADS, else its cores), read once
_team = 0  # torch's team size as last set here


def configure(threads: int | None) -> None:
    """A fixed team of ``threads``, or None: fitted to the free cores, up to torch's
    own default."""
    global _fixed, _share
    _fixed, _share = threads, None


def _started() -> None:
    global _ident
    _ident = threading.get_ident()


def run(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on torch's thread; its result, or its exception."""
    global _executor
    if threading.get_ident() == _ident:
        return fn(*args, **kwargs)  # already there: a nested call would wait for itself
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(1, "voicecli-torch", initializer=_started)
        future: Future[T] = _executor.submit(_fitted, fn, *args, **kwargs)
    return future.result()


def _fitted(fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    global _share, _default, _team
    import torch  # imported by the work's caller already; never by torch_thread's

    if _share is None:
        _default = _default or torch.get_num_threads()
        _team = torch.get_num_threads()
        _share = CpuShare(_fixed or _default, fixed=_fixed is not None)
    threads = _share.threads()
    if threads != _team:
        torch.set_num_threads(threads)
        _team = threads
    return fn(*args, **kwargs)
