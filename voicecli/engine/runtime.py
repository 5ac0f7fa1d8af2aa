"""This user's private directory for the resident engine's socket, lock, log and pid,
and the files in it.

The directory is the ``runtime_dir`` setting, else ``$XDG_RUNTIME_DIR/voicecli``, else
``voicecli-UID`` in the temp dir. voicecli creates it (mode 0700), or uses one that
``lstat`` shows is a real directory of this user's that nobody else may enter: anything
else is refused in one line and never chmodded, because a directory others could write
to may already hold their links. Files in it are opened without following links, and
only as regular files of this user's.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from pathlib import Path

from voicecli.config import Settings
from voicecli.errors import VoiceCliError

SOCKET_NAME = "engine.sock"
LOG_NAME = "engine.log"
LOCK_NAME = "engine.lock"
PID_NAME = "engine.pid"

ADVICE = "Set runtime_dir to a directory only you can use, or use --no-engine."


class UnsafeRuntimeDir(VoiceCliError):
    """A runtime directory or file that others could have prepared."""


def runtime_dir(settings: Settings) -> Path:
    """The engine's directory for ``settings``: made here if missing, refused if it is
    not a private directory of this user's."""
    if settings.runtime_dir is not None:
        path = Path(settings.runtime_dir).expanduser()
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "voicecli"
    else:
        path = Path(tempfile.gettempdir()) / f"voicecli-{os.getuid()}"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        info = path.lstat()
    except OSError as exc:
        raise UnsafeRuntimeDir(
            f"Cannot use {path} for the voicecli engine: {exc.strerror or exc}. {ADVICE}"
        ) from None
    why = _not_private(info, want_dir=True)
    if why is not None:
        raise UnsafeRuntimeDir(f"{path} {why}: the voicecli engine will not use it. {ADVICE}")
    return path


def _not_private(info: os.stat_result, *, want_dir: bool) -> str | None:
    """Why a file or directory with this ``lstat`` is not this user's alone, or None."""
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        return "is a symbolic link"
    if want_dir and not stat.S_ISDIR(mode):
        return "is not a directory"
    if not want_dir and not stat.S_ISREG(mode):
        return "is not a regular file"
    if info.st_uid != os.getuid():
        return f"belongs to another user (uid {info.st_uid})"
    if stat.S_IMODE(mode) & (0o077 if want_dir else 0o022):
        return f"is open to other users (mode {stat.S_IMODE(mode):o})"
    return None


def open_private(path: Path, flags: int) -> int:
    """A file descriptor for ``path`` in a runtime directory, created 0600 if missing:
    never through a link, never a fifo or a device, never another user's file."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeRuntimeDir(
                f"{path} is a symbolic link: the voicecli engine will not follow it. "
                "Remove it, or use --no-engine."
            ) from None
        if exc.errno == errno.ENXIO:  # a fifo (or a socket) nobody reads
            raise UnsafeRuntimeDir(
                f"{path} is not a regular file: the voicecli engine will not use it. "
                "Remove it, or use --no-engine."
            ) from None
        raise UnsafeRuntimeDir(f"Cannot open {path}: {exc.strerror or exc}.") from None
    why = _not_private(os.fstat(fd), want_dir=False)
    if why is not None:
        os.close(fd)
        raise UnsafeRuntimeDir(
            f"{path} {why}: the voicecli engine will not use it. Remove it, or use --no-engine."
        )
    os.set_blocking(fd, True)
    return fd


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if it is gone: with
    the pid, what tells a process from a later one given the same pid."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def record_pid(directory: Path) -> Path:
    """Write this process's pid and start time to the directory's pid file."""
    path = directory / PID_NAME
    fd = open_private(path, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w") as f:
        json.dump({"pid": os.getpid(), "started": process_start(os.getpid())}, f)
    return path


def recorded_pid(directory: Path) -> int | None:
    """The pid the directory's engine recorded, if that very process still runs as this
    user (not a later process given the same pid)."""
    path = directory / PID_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
            return None
        with os.fdopen(fd, "r") as f:
            fd = -1
            record = json.loads(f.read(4096))
        pid, started = int(record["pid"]), record["started"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    if owner != os.getuid() or started is None or process_start(pid) != started:
        return None
    return pid
