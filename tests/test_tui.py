"""The terminal experience, driven for real: voicecli under a pseudo-terminal, a
scripted OpenAI-protocol server, the tiny Kokoro model and the test audio device.

Every step waits for something the program shows (the status line, the prompt);
sleeps only let time pass while a state must hold. The chats on the tiny model speak
through one resident engine, as users' do by default (``through_engine``).
"""

from __future__ import annotations

import itertools
import re
import time

import numpy as np
import pytest

from tests import tui_harness as tui
from voicecli.bench.scripted_llm import Script, ScriptedLLM
from voicecli.chat import CUT_OFF
from voicecli.errors import VoiceCliError

SHORT = "Hello there. This is a short answer."
LONG_SENTENCE = (
    "This sentence keeps going for a long while with plenty of plain words so "
    "that it takes several seconds to say out loud even for a tiny model."
)
LONG = f"First things first. {LONG_SENTENCE} {LONG_SENTENCE.replace('This', 'That')} The end."


@pytest.fixture
def home(tmp_path):
    return tmp_path


def serve(text: str) -> ScriptedLLM:
    return ScriptedLLM(Script.from_text(text, tokens_per_second=40))


def ask_again_and_quit(child, llm: ScriptedLLM, reply: str, question: str) -> None:
    """One more turn, answered ``reply``, then /quit: the request of that turn carries
    the history the first turn left."""
    llm.script = Script.from_text(reply, tokens_per_second=40)
    child.sendline(question)
    tui.wait_prompt(child)
    child.sendline("/quit")
    assert tui.finish(child) == 0


def assistant_turns(llm: ScriptedLLM, request: int) -> list[str]:
    return [m["content"] for m in llm.requests[request].messages if m["role"] == "assistant"]


@pytest.mark.usefixtures("through_engine")
def test_interrupt_remembers_only_what_was_heard(tiny_model_dir, capture_device, home):
    with serve(LONG) as llm:
        child = tui.spawn(tui.chat_args(tiny_model_dir, capture_device[0], llm.base_url), home)
        # Typed chat waits for typing: it says so, and does not claim to be listening.
        tui.wait_state(child, "your turn", tui.START_TIMEOUT)
        assert "listening" not in child.before
        tui.wait_prompt(child)
        child.sendline("tell me something long")
        child.expect_exact("sentence 2/")  # the first long sentence is being heard
        child.send("x")
        tui.wait_state(child, "interrupted")
        child.expect_exact("[interrupted]")
        tui.wait_prompt(child)
        ask_again_and_quit(child, llm, SHORT, "and now?")  # the second reply was spoken in full
    messages = llm.requests[1].messages
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == "tell me something long"
    memory = messages[2]["content"]
    assert memory.endswith(CUT_OFF)
    heard = memory[: -len(CUT_OFF)].strip()
    assert heard.startswith("First things first.")
    assert LONG.startswith(heard) and len(heard) < len(LONG) - 20
    assert LONG_SENTENCE not in heard  # cut inside the sentence that was playing


@pytest.mark.usefixtures("through_engine")
def test_history_carries_the_full_reply_between_turns(tiny_model_dir, capture_device, home):
    with serve(SHORT) as llm:
        child = tui.spawn(
            tui.chat_args(tiny_model_dir, capture_device[0], llm.base_url, "--system", "Be terse."),
            home,
        )
        tui.wait_prompt(child, tui.START_TIMEOUT)
        child.sendline("one")
        tui.wait_state(child, "speaking")
        tui.wait_prompt(child)
        child.sendline("two")
        tui.wait_prompt(child)
        child.sendeof()
        assert tui.finish(child) == 0
    assert llm.requests[1].messages == [
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": SHORT},
        {"role": "user", "content": "two"},
    ]
    # readline kept the questions for the next run (arrow-up history).
    assert (home / "state" / "voicecli" / "history").read_text().split()[-2:] == ["one", "two"]


@pytest.mark.usefixtures("through_engine")
def test_pause_resume_skip_and_quit(tiny_model_dir, capture_device, home):
    with serve(LONG) as llm:
        child = tui.spawn(tui.chat_args(tiny_model_dir, capture_device[0], llm.base_url), home)
        tui.wait_prompt(child, tui.START_TIMEOUT)
        child.sendline("talk")
        child.expect_exact("sentence 2/")
        child.send(" ")
        tui.wait_state(child, "paused")
        time.sleep(1.0)  # not a sync: time passes, and the turn must stay paused
        child.send(" ")
        tui.wait_state(child, "speaking")
        child.send("s")  # skip the rest of the first long sentence
        child.expect_exact("sentence 3/")
        skipped_at = tui.wait_spoken(child, 0)
        tui.wait_spoken(child, skipped_at + 2)  # well into the next sentence
        child.send("x")
        child.expect_exact("[interrupted]")
        tui.wait_prompt(child)
        child.sendline("again")
        child.expect_exact("sentence 2/")
        child.send("q")
        assert tui.finish(child) == 0
    heard = assistant_turns(llm, 1)[0]
    assert heard.startswith("First things first.") and heard.endswith(CUT_OFF)
    # The skipped sentence was cut, and the next one was heard from its start.
    assert LONG_SENTENCE not in heard
    assert "That sentence keeps going" in heard
    # q interrupted the second turn and left; no third request was made.
    assert len(llm.requests) == 2


@pytest.mark.usefixtures("through_engine")
def test_pause_loses_no_audio(tiny_model_dir, capture_device, home):
    with serve(SHORT + " " + LONG_SENTENCE) as llm:
        child = tui.spawn(tui.chat_args(tiny_model_dir, capture_device[0], llm.base_url), home)
        tui.wait_prompt(child, tui.START_TIMEOUT)
        child.sendline("talk")
        tui.wait_state(child, "speaking")
        child.send(" ")
        tui.wait_state(child, "paused")
        time.sleep(1.0)  # the turn must not end while paused
        child.send(" ")
        tui.wait_state(child, "speaking")
        tui.wait_prompt(child)
        ask_again_and_quit(child, llm, "Yes.", "more")
    assert assistant_turns(llm, 1) == [SHORT + " " + LONG_SENTENCE]  # heard to the end


@pytest.mark.usefixtures("through_engine")
def test_ctrl_c_quits_cleanly(tiny_model_dir, capture_device, home):
    with serve(LONG) as llm:
        child = tui.spawn(tui.chat_args(tiny_model_dir, capture_device[0], llm.base_url), home)
        tui.wait_prompt(child, tui.START_TIMEOUT)
        child.sendline("talk")
        tui.wait_state(child, "speaking")
        child.sendintr()
        child.expect_exact("Interrupted.")
        output = child.before
        assert tui.finish(child) == 130
    assert "Traceback" not in output


@pytest.mark.usefixtures("through_engine")
def test_commands_change_the_chat(tiny_model_dir, capture_device, home):
    with serve(SHORT) as llm:
        child = tui.spawn(tui.chat_args(tiny_model_dir, capture_device[0], llm.base_url), home)
        tui.wait_prompt(child, tui.START_TIMEOUT)
        child.sendline("/help")
        child.expect_exact("/clear")
        tui.wait_prompt(child)
        steps = [
            ("/voice am_tiny", "voice: am_tiny"),
            ("/voice nobody", "Unknown voice"),
            ("/speed 1.5", "speed: 1.5"),
            ("/speed 7", "out of range"),
            ("/model other-model", "model: other-model"),
            ("/frobnicate", "Unknown command"),
            ("/system Answer in French.", "system prompt replaced"),
        ]
        for line, shown in steps:
            child.sendline(line)
            child.expect_exact(shown)
            tui.wait_prompt(child)
        child.sendline("first question")
        tui.wait_state(child, "speaking")
        tui.wait_prompt(child)
        child.sendline("/clear")
        child.expect_exact("conversation cleared")
        tui.wait_prompt(child)
        child.sendline("second question")
        tui.wait_state(child, "speaking")
        tui.wait_prompt(child)
        child.sendline("/quit")
        assert tui.finish(child) == 0
    assert llm.requests[0].messages[0] == {"role": "system", "content": "Answer in French."}
    assert llm.requests[1].messages == [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "second question"},
    ]


@pytest.mark.serial  # an underrun under load makes ALSA print to stderr
@pytest.mark.usefixtures("through_engine")
def test_piped_stdout_is_plain_text_and_stderr_is_quiet(tiny_model_dir, capture_device, home):
    out, err = home / "out.txt", home / "err.txt"
    with serve("Hello there. This is **markdown** text.") as llm:
        args = " ".join(
            tui.chat_args(tiny_model_dir, capture_device[0], llm.base_url, "--once", "'say hi'")
        )
        child = tui.spawn([], home, command=f"{tui.VOICECLI} {args} >{out} 2>{err}")
        status = tui.finish(child, tui.START_TIMEOUT)
    assert status == 0, err.read_text()
    text = out.read_text()
    assert "\x1b" not in text
    assert text == "Hello there. This is **markdown** text.\n"
    noise = [
        line
        for line in err.read_text().splitlines()
        if not line.startswith(("LLM: ", "Interrupting with a key is off"))
    ]
    assert noise == []  # no torch, loguru, spaCy or ALSA chatter


def test_a_stalled_device_stops_with_a_clear_error(capture_device, monkeypatch):
    from voicecli.audio import player as player_module
    from voicecli.audio.player import Player
    from voicecli.frames import AudioChunk

    monkeypatch.setattr(player_module, "STALL_SECONDS", 0.5)
    player = Player(24000, device=capture_device[0], capacity_seconds=0.5)
    try:
        player._stream.abort()  # what a vanished device looks like: no more callbacks
        started = time.monotonic()
        with pytest.raises(VoiceCliError, match=re.escape("stopped playing")):
            player.write(AudioChunk(0, np.zeros(24000 * 2, np.float32)))
        assert time.monotonic() - started < 10
    finally:
        player.close()


# Its numbers are spoken far longer than they are written: an estimate from the
# characters would place a cut words away from where it fell.
MOON = (
    "Sure. The moon is 384,400 km away, and it drifts 3.8 cm further from us every "
    "year, slowly and quietly. Its surface is covered in fine grey dust."
)


def vtt_words(path) -> list[tuple[float, str]]:
    """Every word of a WebVTT file voicecli wrote, with its start in seconds."""
    import webvtt
    from webvtt.models import Timestamp

    def seconds(stamp: str) -> float:
        return Timestamp.from_string(stamp).in_milliseconds() / 1000

    words = []
    for cue in webvtt.read(str(path)).captions:
        at = seconds(cue.start)
        for piece in re.split(r"(<[\d:.]+>)", cue.raw_text):
            if piece.startswith("<"):
                at = seconds(piece[1:-1])
                continue
            words.extend((at, w) for w in piece.split())
    return words


def locate(haystack: np.ndarray, needle: np.ndarray) -> int:
    """Where ``needle``'s very samples are in ``haystack`` (least squared difference)."""
    needle = needle.astype(np.float64)
    n = len(haystack) + len(needle)
    spots = len(haystack) - len(needle) + 1
    dot = np.fft.irfft(np.fft.rfft(haystack, n) * np.conj(np.fft.rfft(needle, n)), n)[:spots]
    power = np.concatenate([[0.0], np.cumsum(haystack.astype(np.float64) ** 2)])
    at = int(np.argmin(power[len(needle) :] - power[:spots] - 2 * dot + np.sum(needle**2)))
    assert np.abs(haystack[at : at + len(needle)] - needle).max() < 1e-3  # the very samples
    return at


def played_until(captured: np.ndarray, recorded: np.ndarray) -> int:
    """Where in ``recorded`` (the --output file, up to the next turn) the device's audio
    of a turn stopped: the last 0.1 s of sound the device took before the silence that
    ends ``captured`` (up to the next turn's first word), found in the file. An underrun
    on the way shifts what follows it in the device's audio: only the end can say."""
    loud = np.flatnonzero(np.abs(captured) > 1e-3)
    gaps = np.flatnonzero(np.diff(loud) > 0.25 * 24_000)  # the pause between the turns
    end = loud[gaps[-1]] if gaps.size else loud[-1]
    tail = captured[end - 2400 : end + 1]
    return locate(recorded, tail) + len(tail)


@pytest.mark.slow
@pytest.mark.serial
def test_an_interrupt_keeps_exactly_the_words_that_reached_the_device(
    real_model_dir, fresh_capture, home, tmp_path
):
    from tests.wavfile import read_wav

    wav, vtt = tmp_path / "turns.wav", tmp_path / "turns.vtt"
    args = tui.chat_args(real_model_dir, fresh_capture[0], "http://127.0.0.1:1")
    args[args.index("af_tiny")] = "jf_alpha"
    with serve(MOON) as llm:
        args[args.index("--base-url") + 1] = llm.base_url
        more = ["--lang", "a", "--output", str(wav), "--play", "--captions", str(vtt)]
        child = tui.spawn([*args, *more], home)
        tui.wait_prompt(child, tui.START_TIMEOUT)
        child.sendline("tell me about the moon")
        # Inside the long second sentence, past its numbers' first part: a slow host
        # stalls after "The moon is" while the numbers are decoded (2 s seen on one).
        tui.wait_spoken(child, 5)
        child.send("x")
        tui.wait_state(child, "interrupted")
        tui.wait_prompt(child)
        ask_again_and_quit(child, llm, "Fine.", "go on")
    memory = assistant_turns(llm, 1)[0]
    assert memory.endswith(CUT_OFF)
    heard = memory[: -len(CUT_OFF)].split()
    recorded, rate = read_wav(wav)
    captured = np.fromfile(fresh_capture[1], np.float32)
    cut = played_until(captured, recorded) / rate
    words = vtt_words(vtt)
    assert [w for _, w in words[: len(heard)]] == heard  # the reply's words, in order
    # Every word that had ended (the next had begun) before the device stopped was kept,
    # and none that began after it. Between the two: the word being said, and the
    # device's own latency (the capture is taken before the sound card's buffer).
    ended = sum(1 for (_, _), (start, _) in itertools.pairwise(words) if start <= cut - 0.15)
    begun = sum(1 for start, _ in words if start < cut + 0.1)
    assert 3 < ended <= len(heard) <= begun < len(MOON.split()), (cut, heard, words)
