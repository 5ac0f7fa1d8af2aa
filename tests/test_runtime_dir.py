"""The engine's runtime directory, as a second user on the same machine would attack it:
a directory another user owns or may write to is refused in one line and left as it was,
and nothing in it is followed through a link or opened as a fifo or another's file."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from voicecli.cli import cli
from voicecli.config import Settings
from voicecli.engine.runtime import UnsafeRuntimeDir, runtime_dir

NOBODY = 65534


def engine(runtime: Path, *args: str):
    env = {"VOICECLI_RUNTIME_DIR": str(runtime), "VOICECLI_ENGINE": "1"}
    return CliRunner().invoke(cli, ["engine", *args], env=env)


def one_line(result) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


def test_a_directory_others_may_write_to_is_refused_and_left_as_it_was(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # a /tmp of its own
    line = one_line(engine(shared, "status"))
    assert str(shared) in line and "open to other users (mode 1777)" in line
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777  # never chmodded
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    assert "is a symbolic link" in one_line(engine(link, "status"))


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to act as a second user")
def test_a_second_user_is_refused_a_directory_of_roots_and_gets_one_of_its_own():
    """Another user's process (forked, then setuid to nobody), on a directory root owns
    with mode 1777, as VOICECLI_RUNTIME_DIR may name: refused, and nothing changed."""
    parent = Path(tempfile.mkdtemp())
    parent.chmod(0o755)
    shared = parent / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the second user
        os.close(read)
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            answers = []
            for path in (shared, shared / "mine"):
                try:
                    answers.append(f"ok {runtime_dir(Settings(runtime_dir=path))}")
                except UnsafeRuntimeDir as exc:
                    answers.append(f"refused {exc}")
            os.write(write, "\n".join(answers).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        theirs, own = pipe.read().split("\n")
    os.waitpid(child, 0)
    assert theirs.startswith("refused") and "belongs to another user (uid 0)" in theirs
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777  # never chmodded
    assert own == f"ok {shared / 'mine'}"  # made by that user, for that user
    info = (shared / "mine").lstat()
    assert info.st_uid == NOBODY and stat.S_IMODE(info.st_mode) == 0o700


@pytest.mark.parametrize("planted", ["symlink", "fifo", "another's"])
@pytest.mark.parametrize("name", ["engine.lock", "engine.log"])
def test_nothing_planted_in_it_is_followed_or_opened(tmp_path, planted, name, tiny_model_dir):
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    target = tmp_path / "target"
    if planted == "symlink":
        (runtime / name).symlink_to(target)
    elif planted == "fifo":
        os.mkfifo(runtime / name)
    else:
        (runtime / name).write_text("")
        os.chown(runtime / name, NOBODY, NOBODY)
        if os.getuid() != 0:
            pytest.skip("needs root to give a file to another user")
    args = ("start", "--model-dir", str(tiny_model_dir), "--voice", "af_tiny")
    line = one_line(engine(runtime, *args))
    assert name in line
    reason = {
        "symlink": "is a symbolic link",
        "fifo": "is not a regular file",
        "another's": "belongs to another user",
    }[planted]
    assert reason in line
    assert not target.exists()  # nothing was created through the link
    assert not (runtime / "engine.sock").exists()  # no engine started
