"""What the listening tests share: the user's utterances (spoken once, by the real
Kokoro weights, in a voice unlike the assistant's), a virtual room of the test's own,
and how heard words are compared with said ones."""

from __future__ import annotations

import re
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from voicecli.bench.room import VirtualRoom
from voicecli.errors import VoiceCliError

QUESTION = "What is the capital of France?"
FOLLOW_UP = "Tell me three facts about the moon."
USER_VOICE = "jm_kumo"  # the user; the assistant speaks with the tiny model's voice


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def same_words(heard: str, said: str) -> bool:
    """At most one word wrong: tiny.en on accented synthetic speech (WER 0-12 %)."""
    a, b = words(heard), words(said)
    return len(a) == len(b) and sum(x != y for x, y in zip(a, b, strict=True)) <= 1


@pytest.fixture(scope="session")
def utterances(real_model_dir, tmp_path_factory) -> dict[str, Path]:
    """WAVs (24 kHz, as Kokoro speaks) of what the user says, made once for all the
    parallel workers (loading Kokoro takes a worker about 20 s)."""
    from filelock import FileLock

    out = tmp_path_factory.getbasetemp().parent / "utterances"
    out.mkdir(exist_ok=True)
    said = {"question": QUESTION, "follow_up": FOLLOW_UP}
    paths = {name: out / f"{name}.wav" for name in said}
    with FileLock(str(out / "lock")):
        if not all(path.is_file() for path in paths.values()):
            from voicecli.tts.kokoro.synthesizer import KokoroSynthesizer

            synth = KokoroSynthesizer(voice=USER_VOICE, lang="a", model_dir=real_model_dir)
            for name, text in said.items():
                audio = np.concatenate(list(synth.speaker().speak(text)))
                write_wav(out / f"{name}.tmp.wav", audio, 24_000).rename(paths[name])
    return paths


def write_wav(path: Path, audio: np.ndarray, rate: int) -> Path:
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return path


@pytest.fixture
def room(monkeypatch) -> Iterator[VirtualRoom]:
    try:
        room = VirtualRoom()
    except VoiceCliError as exc:
        pytest.skip(str(exc))
    for name, value in room.env.items():
        monkeypatch.setenv(name, value)
    yield room
    room.close()
