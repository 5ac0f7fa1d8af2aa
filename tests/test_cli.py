"""The voicecli command as users run it: arguments, stdin, config, bad input.

In-process (click's runner) where no real stdin is involved; a real
subprocess where stdin must be a pipe.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.faulty_llm import FailingLLM
from tests.wavfile import read_wav
from voicecli.bench.scripted_llm import Script, ScriptedLLM
from voicecli.cli import cli
from voicecli.config import Settings

ROOT = Path(__file__).resolve().parent.parent


def run(args, **kw):
    result = CliRunner().invoke(cli, args, catch_exceptions=False, **kw)
    assert "Traceback" not in result.output
    return result


def tiny_args(tiny_model_dir, *more):
    return ["--model-dir", str(tiny_model_dir), "--voice", "af_tiny", *more]


def test_help_lists_the_commands():
    result = run(["--help"])
    for command in ("chat", "say", "serve", "voices", "devices", "transcribe"):
        assert command in result.output


def test_say_writes_a_wav(tiny_model_dir, tmp_path):
    out = tmp_path / "hello.wav"
    result = run(["say", *tiny_args(tiny_model_dir, "-o", str(out)), "Hello there. Bye now."])
    assert result.exit_code == 0, result.output
    audio, rate = read_wav(out)
    assert rate == 24_000 and len(audio) > 2400 and np.abs(audio).max() > 0


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty"),
        ("   \n\t ", "empty"),
        ("** __ ** ---", "no speakable words"),
        ("🙂🎉", "no speakable words"),
    ],
)
def test_say_nothing_speakable_is_a_clear_error(text, words, tiny_model_dir):
    result = run(["say", *tiny_args(tiny_model_dir), text])
    assert result.exit_code == 1
    assert words in result.output


def test_unknown_voice_lists_the_available_ones(tiny_model_dir, tmp_path):
    result = run(
        [
            "say",
            "--model-dir",
            str(tiny_model_dir),
            "--voice",
            "zz_nobody",
            "-o",
            str(tmp_path / "x.wav"),
            "Hi there.",
        ]
    )
    assert result.exit_code == 1
    assert "zz_nobody" in result.output and "af_tiny" in result.output


def test_unknown_device_suggests_output(tiny_model_dir, capture_device):
    result = run(["say", *tiny_args(tiny_model_dir), "--device", "no-such-device", "Hi there."])
    assert result.exit_code == 1
    assert "--output" in result.output


def test_missing_model_dir_says_how_to_fix(tmp_path):
    result = run(
        ["say", "--model-dir", str(tmp_path / "nope"), "-o", str(tmp_path / "x.wav"), "Hi there."]
    )
    assert result.exit_code == 1
    assert "--model-dir" in result.output


def test_corrupt_weights_give_a_clear_error(tiny_model_dir, tmp_path):
    broken = tmp_path / "broken"
    (broken / "voices").mkdir(parents=True)
    (broken / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    (broken / "voices" / "af_tiny.pt").write_bytes(
        (tiny_model_dir / "voices" / "af_tiny.pt").read_bytes()
    )
    (broken / "kokoro-v1_0.pth").write_bytes(
        (tiny_model_dir / "kokoro-v1_0.pth").read_bytes()[:100_000]
    )
    result = run(
        [
            "say",
            "--model-dir",
            str(broken),
            "--voice",
            "af_tiny",
            "-o",
            str(tmp_path / "x.wav"),
            "Hi there.",
        ]
    )
    assert result.exit_code == 1
    assert "corrupt" in result.output


@pytest.mark.parametrize(
    "content, words",
    [
        ("voice = [unclosed", "not valid TOML"),
        ("colour = 'red'", "unknown setting"),
        ("speed = 'fast'", "speed"),
    ],
)
def test_bad_config_file(tmp_path, content, words):
    path = tmp_path / "config.toml"
    path.write_text(content)
    result = run(["say", "--config", str(path), "Hi there."])
    assert result.exit_code == 1
    assert words in result.output


def test_settings_precedence(tmp_path, monkeypatch):
    from voicecli.config import resolve

    path = tmp_path / "c.toml"
    path.write_text('voice = "bf_emma"\nspeed = 1.1\nmodel = "from-file"\n')
    env = {"VOICECLI_SPEED": "1.3", "OPENAI_BASE_URL": "http://env/v1"}
    s = resolve(path, {"speed": 1.5}, environ=env)
    assert (s.voice, s.speed, s.model, s.base_url) == ("bf_emma", 1.5, "from-file", "http://env/v1")
    assert resolve(path, {}, environ=env).speed == 1.3


@pytest.mark.parametrize("name", ["llm_threads", "synth_threads"])
def test_thread_settings_are_whole_numbers_in_range(name):
    from voicecli.config import resolve
    from voicecli.errors import VoiceCliError

    assert getattr(resolve(None, {name: 2}, environ={}), name) == 2
    for bad in (0, 1000, 1.5):
        with pytest.raises(VoiceCliError, match=name):
            resolve(None, {name: bad}, environ={})


def test_llm_nice_is_a_niceness_and_the_child_runs_at_it(tmp_path):
    from voicecli.child import ChildProcess
    from voicecli.config import resolve
    from voicecli.errors import VoiceCliError

    assert resolve(None, {"llm_nice": 19}, environ={}).llm_nice == 19
    for bad in (-1, 20, 2.5):
        with pytest.raises(VoiceCliError, match="llm_nice"):
            resolve(None, {"llm_nice": bad}, environ={})
    log = tmp_path / "child.log"
    # A thread the child starts has its niceness too (Linux keeps one per thread).
    code = (
        "import os, threading; t = threading.Thread(target=lambda: print(os.nice(0))); "
        "t.start(); t.join(); print(os.nice(0))"
    )
    child = ChildProcess([sys.executable, "-c", code], log, nice=7)
    child.start()
    deadline = time.monotonic() + 30
    while child.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    base = os.nice(0)
    assert log.read_text().split() == [str(base + 7)] * 2


@pytest.mark.skipif(os.name != "posix", reason="sessions and process groups")
def test_a_child_has_a_process_group_of_its_own_in_voicecli_s_session(tmp_path):
    from voicecli.child import ChildProcess

    child = ChildProcess([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "log")
    child.start()
    try:
        # Its own group: the terminal's Ctrl-C reaches voicecli's group only.
        assert os.getpgid(child.pid) == child.pid != os.getpgid(0)
        # voicecli's session: Linux's autogroups share the CPU between sessions before
        # niceness counts, so in a session of its own the LLM took a core from Kokoro.
        assert os.getsid(child.pid) == os.getsid(0)
    finally:
        child.stop()
    assert not child.running()


def test_config_example_documents_every_setting():
    text = (ROOT / "config.example.toml").read_text()
    missing = [f.name for f in fields(Settings) if f"{f.name} =" not in text]
    assert not missing


def test_chat_once_speaks_the_streamed_reply(tiny_model_dir, tmp_path):
    out = tmp_path / "reply.wav"
    with ScriptedLLM(Script.from_text("Hello there. I am a test reply.", 200)) as llm:
        result = run(
            [
                "chat",
                *tiny_args(tiny_model_dir, "-o", str(out)),
                "--base-url",
                llm.base_url,
                "--api-key",
                "x",
                "--once",
                "Say hello.",
            ]
        )
        messages = llm.last.messages
    assert result.exit_code == 0, result.output
    assert "Hello there. I am a test reply." in result.output
    assert messages[-1] == {"role": "user", "content": "Say hello."}
    assert messages[0]["role"] == "system"
    assert read_wav(out)[0].size > 0


@pytest.mark.parametrize("status, words", [(401, "API key"), (429, "rate limiting")])
def test_chat_llm_errors_exit_nonzero(tiny_model_dir, tmp_path, status, words):
    with FailingLLM(Script.from_text("Hi."), status) as llm:
        result = run(
            [
                "chat",
                *tiny_args(tiny_model_dir, "-o", str(tmp_path / "x.wav")),
                "--base-url",
                llm.base_url,
                "--api-key",
                "x",
                "--once",
                "Hi",
            ]
        )
    assert result.exit_code == 1
    assert words in result.output


def test_chat_unreachable_server(tiny_model_dir, tmp_path):
    result = run(
        [
            "chat",
            *tiny_args(tiny_model_dir, "-o", str(tmp_path / "x.wav")),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--api-key",
            "x",
            "--once",
            "Hi",
        ]
    )
    assert result.exit_code == 1
    assert "Cannot reach" in result.output


def test_voices_lists_by_language_and_gender(tiny_model_dir):
    result = run(["voices"])
    assert "af_heart" in result.output and "American English" in result.output
    assert "female" in result.output
    local = run(["voices", "--model-dir", str(tiny_model_dir)])
    table = local.output.split("Blend voices")[0]
    assert "af_tiny" in table and "af_heart" not in table


def test_devices_marks_the_default(capture_device):
    result = run(["devices"])
    assert result.exit_code == 0
    assert "voicecli_capture" in result.output
    assert re.search(r"output( input)? +│ \d+ +│ default", result.output), result.output


# --- real subprocesses: stdin is a pipe ----------------------------------------------
def voicecli(*args, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "voicecli", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,
    )


@pytest.mark.usefixtures("through_engine")  # as users run it: a thin client
@pytest.mark.long
def test_piped_stdin_is_spoken_before_eof(tiny_model_dir, fresh_capture):
    device, capture = fresh_capture
    proc = voicecli("say", *tiny_args(tiny_model_dir, "--device", device))
    try:
        proc.stdin.write(b"The first line is here.\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 120
        heard = False
        while time.monotonic() < deadline and proc.poll() is None:
            if capture.exists() and np.abs(np.fromfile(capture, dtype="<f4")).max(initial=0) > 0:
                heard = True
                break
            time.sleep(0.1)
        assert heard, "stdin's first line was not spoken while stdin stayed open"
        proc.stdin.write(b"And a second one.\n")
        proc.stdin.close()
        assert proc.wait(120) == 0, proc.stderr.read().decode()
    finally:
        proc.kill()


@pytest.mark.usefixtures("through_engine")  # as users run it: a thin client
def test_invalid_utf8_on_stdin_is_reported_after_speaking_the_valid_part(tiny_model_dir, tmp_path):
    out = tmp_path / "x.wav"
    proc = voicecli("say", *tiny_args(tiny_model_dir, "-o", str(out)))
    _, err = proc.communicate(b"Hello there.\n\xff\xfe broken\n", timeout=180)
    assert proc.returncode == 1
    assert b"not valid UTF-8" in err and b"offset 13" in err
    # One line, with or without a terminal: writing a file only, there is nothing to hear
    # and so no note that keys cannot interrupt it.
    assert len(err.strip().splitlines()) == 1, err
    assert read_wav(out)[0].size > 0, "the valid text before the bad byte was lost"


@pytest.mark.usefixtures("through_engine")  # as users run it: a thin client
def test_huge_single_line_starts_speaking_and_quits_cleanly(tiny_model_dir, tmp_path):
    out = tmp_path / "x.wav"
    line = ("word " * 40_000).encode() + b"\n"
    proc = voicecli("say", *tiny_args(tiny_model_dir, "-o", str(out)))

    def feed():
        # voicecli reads only as fast as it speaks (backpressure), so this blocks.
        try:
            proc.stdin.write(line)
            proc.stdin.close()
        except (BrokenPipeError, ValueError):
            pass

    threading.Thread(target=feed, daemon=True).start()
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not out.exists() or out.stat().st_size < 10_000):
            time.sleep(0.2)
        assert out.stat().st_size >= 10_000, "nothing was spoken from the huge line"
        proc.send_signal(2)  # Ctrl-C
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert b"Traceback" not in err


@pytest.mark.usefixtures("through_engine")  # as users run it: a thin client
def test_say_with_empty_stdin(tiny_model_dir, tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "voicecli",
            "say",
            *tiny_args(tiny_model_dir, "-o", str(tmp_path / "x.wav")),
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
    )
    # /dev/null is not a terminal: it is empty input.
    assert proc.returncode == 1
    assert b"Nothing to say" in proc.stderr and b"Traceback" not in proc.stderr


def test_say_with_the_real_kokoro_weights(real_model_dir, tmp_path):
    out = tmp_path / "real.wav"
    result = run(
        [
            "say",
            "--model-dir",
            str(real_model_dir),
            "--voice",
            "jf_alpha",
            "--lang",
            "a",
            "-o",
            str(out),
            "Hello, this is the real Kokoro model speaking.",
        ]
    )
    assert result.exit_code == 0, result.output
    audio, rate = read_wav(out)
    seconds = len(audio) / rate
    rms = float(np.sqrt(np.mean(audio**2)))
    # About 3 s of real speech: neither silence nor noise-length nonsense.
    assert 1.5 < seconds < 8 and 0.01 < rms < 0.5, (seconds, rms)


def energy_db(audio: np.ndarray, rate: int, start: float, end: float) -> float:
    piece = audio[max(0, int(start * rate)) : max(0, int(end * rate))]
    return 10 * float(np.log10(np.mean(piece**2) + 1e-12)) if piece.size else -120.0


def seconds_of(timestamp: str) -> float:
    from webvtt.models import Timestamp

    return Timestamp.from_string(timestamp).in_milliseconds() / 1000


def test_captions_of_the_real_weights_start_where_the_speech_does(real_model_dir, tmp_path):
    import webvtt

    out, vtt = tmp_path / "a.wav", tmp_path / "a.vtt"
    text = "Hello there, my friend. Seven big apples sat on the table. And then, quietly, we left."
    args = ["--model-dir", str(real_model_dir), "--voice", "jf_alpha", "--lang", "a"]
    result = run(["say", *args, "-o", str(out), "--captions", str(vtt), text])
    assert result.exit_code == 0, result.output
    audio, rate = read_wav(out)
    cues = webvtt.read(str(vtt)).captions
    assert " ".join(c.text for c in cues) == text
    assert seconds_of(cues[-1].end) <= len(audio) / rate
    loud = energy_db(audio, rate, 0, len(audio) / rate)
    for cue in cues:
        # Each cue (its first word) begins as its sound does: quiet just before, speech
        # just after. A cue early by a word or late by one would fail one of the two.
        start = seconds_of(cue.start)
        before = energy_db(audio, rate, start - 0.12, start - 0.02)
        after = energy_db(audio, rate, start + 0.02, start + 0.15)
        assert after > loud - 12 and after - before > 12, (cue.text, before, after, loud)


def test_captions_as_subrip_escape_nothing_and_need_an_audio_file(tiny_model_dir, tmp_path):
    import webvtt

    srt = tmp_path / "a.srt"
    result = run(
        [
            "say",
            *tiny_args(tiny_model_dir, "-o", str(tmp_path / "a.wav"), "--captions", str(srt)),
            "Tom & Jerry <3 cheese.",
        ]  # fmt: skip
    )
    assert result.exit_code == 0, result.output
    assert " ".join(c.text for c in webvtt.from_srt(str(srt)).captions) == "Tom & Jerry <3 cheese."
    vtt = tmp_path / "b.vtt"
    result = run(
        [
            "say",
            *tiny_args(tiny_model_dir, "-o", str(tmp_path / "b.wav"), "--captions", str(vtt)),
            "Tom & Jerry <3 cheese.",
        ]  # fmt: skip
    )
    # WebVTT cue text is markup: escaped, and each word after the first has its start.
    assert "<3" not in vtt.read_text() and "&amp;" in vtt.read_text()
    (cue,) = webvtt.read(str(vtt)).captions
    assert html.unescape(cue.text) == "Tom & Jerry <3 cheese."
    assert (
        re.findall(r"<(\d\d:\d\d:\d\d\.\d{3})>", cue.raw_text)
        == sorted(re.findall(r"<(\d\d:\d\d:\d\d\.\d{3})>", cue.raw_text))
        and cue.raw_text.count("<0") == 4
    )
    for bad, message in [
        (["--captions", str(tmp_path / "c.vtt")], "--captions needs --output"),
        (["-o", str(tmp_path / "c.wav"), "--captions", str(tmp_path / "c.txt")], ".vtt"),
    ]:
        result = run(["say", *tiny_args(tiny_model_dir, *bad), "Hello."])
        assert result.exit_code != 0 and message in result.output
        assert not (tmp_path / "c.wav").exists()
