"""A child process that never outlives voicecli.

The embedded LLM server and the load bench's ``voicecli serve`` both run as
children. Each one gets its own process group, which ``stop()`` signals as a
whole (called by its owner and by ``atexit``), so the terminal's Ctrl-C reaches
only voicecli, which decides. On Linux the kernel also SIGKILLs the child when
voicecli dies without running any Python cleanup (SIGKILL, a segfault, an
unhandled SIGTERM).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import pathlib
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

_PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def tail(path: pathlib.Path, lines: int = 20) -> str:
    """The last lines of a log, read from its end so that a huge log costs nothing."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16_384))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _preexec(nice: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking Linux to SIGKILL the child when voicecli dies, and
    lowering the child's priority by ``nice`` (before exec, so that every thread it
    starts inherits it: Linux keeps a niceness per thread).

    SIGKILL rather than SIGTERM: a child has nothing to flush, and a server's
    graceful shutdown can wait on work in flight.
    """
    linux = sys.platform.startswith("linux")
    if not linux and not nice:
        return None
    # Loaded before the fork: the child should do as little as possible.
    libc = ctypes.CDLL(None, use_errno=True) if linux else None
    parent_pid = os.getpid()

    def preexec() -> None:
        if nice:
            os.nice(nice)
        if libc is None:
            return
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died before prctl took effect; nothing would
        # signal us then.
        if os.getppid() != parent_pid:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class ChildProcess:
    """One child, its output appended to ``log_path``; ``stop()`` is idempotent."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: pathlib.Path,
        *,
        env: Mapping[str, str] | None = None,
        grace: float = 5.0,
        nice: int = 0,
        own_session: bool = False,
    ) -> None:
        self.argv = list(argv)
        self.nice = nice
        self.own_session = own_session
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.grace = grace
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                # A process group of its own, so that the terminal's Ctrl-C reaches
                # voicecli only; but voicecli's session, because Linux's autogroups
                # share the CPU between sessions first: in a session of its own, the
                # LLM took a core from Kokoro whatever its niceness (docs/streaming.md).
                # ``own_session``: a child that stands for another program the user runs.
                process_group=0 if os.name == "posix" and not self.own_session else None,
                start_new_session=self.own_session,
                preexec_fn=_preexec(self.nice),
            )
        atexit.register(self.stop)

    def exit_code(self) -> int | None:
        """None while it runs (or before it started); its exit code once it ended."""
        return self._proc.poll() if self._proc is not None else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 20) -> str:
        return tail(self.log_path, lines)

    def stop(self) -> None:
        """SIGTERM to the group, then SIGKILL after ``grace`` seconds."""
        proc, self._proc = self._proc, None
        atexit.unregister(self.stop)
        if proc is None:
            return
        self._signal(proc, force=False)
        try:
            proc.wait(timeout=self.grace)
        except subprocess.TimeoutExpired:
            self._signal(proc, force=True)
            proc.wait()

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], *, force: bool) -> None:
        try:
            if os.name == "posix":
                # The group id is the child's pid (process_group=0); it stays
                # ours until the child is reaped, which only proc.wait() does.
                os.killpg(proc.pid, signal.SIGKILL if force else signal.SIGTERM)
            elif force:
                proc.kill()
            else:
                proc.terminate()
        except ProcessLookupError:
            pass
