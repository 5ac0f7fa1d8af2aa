"""The CLI under careless input: every mistake is one clear line, no traceback, and as
early as it can be told. Run as real processes, so that nothing printed at interpreter
exit ("Exception ignored ...") escapes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faulty_llm import BreakingLLM, SilentServer
from tests.wavfile import read_wav
from voicecli.bench.scripted_llm import Script


def voicecli(*args: str, env: dict[str, str] | None = None, timeout: float = 120):
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "voicecli", *args], capture_output=True, text=True,
        timeout=timeout, env={**os.environ, **(env or {})},
    )  # fmt: skip
    result.seconds = time.monotonic() - started  # type: ignore[attr-defined]
    for stream in (result.stdout, result.stderr):
        assert "Traceback" not in stream and "Exception ignored" not in stream, stream
    return result


def tiny(tiny_model_dir: Path, *more: str) -> list[str]:
    return ["--model-dir", str(tiny_model_dir), "--voice", "af_tiny", *more]


def error_line(result) -> str:
    lines = [line for line in result.stderr.splitlines() if line.startswith("voicecli:")]
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.usefixtures("through_engine")  # as users run it: a thin client
@pytest.mark.parametrize(
    "output, words", [("/dev/full", "No space left"), ("/proc/version", "Cannot write")]
)
def test_an_output_that_cannot_be_written_is_one_clear_line(tiny_model_dir, output, words):
    result = voicecli("say", *tiny(tiny_model_dir, "-o", output), "Hello.")
    assert words in error_line(result)


def test_an_output_in_a_missing_directory_fails_before_the_model_loads(tiny_model_dir):
    result = voicecli("say", *tiny(tiny_model_dir, "-o", "/nonexistent/dir/x.wav"), "Hello.")
    assert "/nonexistent/dir does not exist" in error_line(result)
    assert "Loading" not in result.stderr


def test_a_log_file_that_cannot_be_written(tiny_model_dir):
    result = voicecli("say", *tiny(tiny_model_dir, "--log-file", "/nonexistent/dir/x.log"), "Hi.")
    assert "Cannot write the log file" in error_line(result)


@pytest.mark.parametrize("voice", ["af_tiny:nan+am_tiny", "af_tiny:inf", "../voices/af_tiny"])
def test_a_malformed_voice_is_one_line(tiny_model_dir, tmp_path, voice):
    result = voicecli("say", "--model-dir", str(tiny_model_dir), "--voice", voice,
                      "-o", str(tmp_path / "x.wav"), "Hello.")  # fmt: skip
    assert "voice" in error_line(result).lower()


@pytest.mark.parametrize("value", ["nan", "inf", "1e300", "-1"])
def test_numeric_settings_are_checked_for_finiteness_and_range(tiny_model_dir, tmp_path, value):
    env = {"VOICECLI_MAX_AUDIO_AHEAD": value}
    result = voicecli("say", *tiny(tiny_model_dir, "-o", str(tmp_path / "x.wav")), "Hi.", env=env)
    assert "max_audio_ahead" in error_line(result)
    config = tmp_path / "c.toml"
    config.write_text(f"max_audio_ahead = {value}\n")
    result = voicecli("say", "--config", str(config), *tiny(tiny_model_dir), "Hi.")
    assert "max_audio_ahead" in error_line(result)


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_serve_refuses_a_port_that_is_not_one(port):
    result = voicecli("serve", "--port", port)
    assert result.returncode == 2 and "port" in result.stderr.lower()


@pytest.mark.usefixtures("through_engine")  # as users run it: a thin client
def test_an_llm_server_that_never_answers_is_reported_soon(tiny_model_dir, tmp_path):
    with SilentServer() as llm:
        result = voicecli(
            "chat", *tiny(tiny_model_dir, "-o", str(tmp_path / "x.wav")), "--base-url",
            llm.base_url, "--api-key", "x", "--once", "Hi?", env={"VOICECLI_LLM_TIMEOUT": "2"},
        )  # fmt: skip
    assert "did not answer within 2 s" in error_line(result)
    assert result.seconds < 30  # 2 s, plus start-up


@pytest.mark.usefixtures("through_engine")  # as users run it: a thin client
@pytest.mark.parametrize("how, words", [("cut", "was cut off"), ("drop", "broke off")])
def test_a_reply_cut_off_mid_stream_is_said_and_what_came_is_spoken(
    tiny_model_dir, tmp_path, how, words
):
    out = tmp_path / "x.wav"
    script = Script.from_text("Here is the first sentence. And here is more of it.")
    with BreakingLLM(script, after=8, how=how) as llm:
        result = voicecli("chat", *tiny(tiny_model_dir, "-o", str(out)), "--base-url",
                          llm.base_url, "--api-key", "x", "--once", "Hi?")  # fmt: skip
    assert words in error_line(result)
    assert read_wav(out)[0].size > 0  # the part that arrived was spoken


def test_text_that_is_not_utf8_is_one_line_wherever_it_comes_from(tiny_model_dir, tmp_path):
    """An argument, a variable and a flag with a byte that is not UTF-8 (Python keeps it
    as a lone surrogate): refused before anything is loaded or written, naming where."""
    out = tmp_path / "x.wav"
    result = subprocess.run(
        [sys.executable.encode(), b"-m", b"voicecli", b"say",
         *(a.encode() for a in tiny(tiny_model_dir, "-o", str(out))), b"Hello \xff world."],
        capture_output=True, timeout=120, env=os.environ,
    )  # fmt: skip
    err = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 1 and "Traceback" not in err
    assert err.strip().splitlines() == [
        "voicecli: The text is not valid UTF-8 (byte 0xff at character 7). Convert it first, "
        "for example: iconv -f latin1 -t utf-8 FILE."
    ]
    assert not out.exists()  # no empty WAV left behind
    env = {**os.environb, b"VOICECLI_VOICE": b"af_\xfftiny"}
    result = subprocess.run(
        [sys.executable.encode(), b"-m", b"voicecli", b"say", b"-o", str(out).encode(), b"Hi."],
        capture_output=True,
        timeout=120,
        env=env,
    )
    err = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 1 and len(err.strip().splitlines()) == 1, err
    assert "VOICECLI_VOICE" in err and "byte 0xff at character 4" in err
    once = voicecli("chat", "--once", "what \udcff now?", "--no-engine")
    assert "The question is not valid UTF-8" in error_line(once)
