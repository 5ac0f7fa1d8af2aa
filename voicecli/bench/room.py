"""A virtual room for voice input, on the PulseAudio server of ``.ci/audio-env.sh``: a
microphone (the monitor of a null sink of its own) and speakers (another null sink),
optionally with the speakers' sound reaching the microphone as a room's echo. Each room
is its own, so parallel tests and benches never hear each other. Point PortAudio at it
with ``env`` (PULSE_SOURCE, PULSE_SINK), in this process or a child's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from voicecli.config import Settings
from voicecli.errors import VoiceCliError

if TYPE_CHECKING:
    from voicecli.audio.player import Player
    from voicecli.session import Session

# The user, in the benches that speak to voicecli: a voice unlike the assistant's.
USER_VOICE = "jm_kumo"

# The loopback's gain: a Kokoro reply's echo at the microphone well under a Kokoro
# utterance said into it (``bench barge-in`` measures how far), as a room on speakers.
ECHO_GAIN_DB = -9.0


def speak_as_user(settings: Settings, texts: list[str]) -> list[np.ndarray]:
    """Each text spoken by Kokoro in ``USER_VOICE`` (24 kHz), from its first sound to
    its last, so that where speech begins is known."""
    from voicecli.speech import local_synthesizer

    synth = local_synthesizer(replace(settings, voice=USER_VOICE, lang="a", speed=1.0))
    try:
        spoken = []
        for text in texts:
            audio = np.concatenate(list(synth.speaker().speak(text)))
            loud = np.flatnonzero(np.abs(audio) > 0.01)
            spoken.append(audio[loud[0] : loud[-1] + 1].astype(np.float32))
        return spoken
    finally:
        synth.close()


class VirtualRoom:
    def __init__(self) -> None:
        if not shutil.which("pactl") or not os.environ.get("PULSE_SERVER"):
            raise VoiceCliError("No PulseAudio: source .ci/audio-env.sh first.")
        tag = uuid.uuid4().hex[:8]
        self.mic = f"voicecli_room_mic_{tag}"
        self.speakers = f"voicecli_room_speakers_{tag}"
        self.modules: list[str] = []
        self.keepalive: subprocess.Popen | None = None
        try:
            self._load(f"module-null-sink sink_name={self.mic} rate=16000 channels=1")
            self._load(f"module-null-sink sink_name={self.speakers} rate=24000 channels=1")
            # An idle null sink stalls new streams (.ci/audio-env.sh): keep the speakers busy.
            self.keepalive = subprocess.Popen(
                [
                    "pacat",
                    f"--device={self.speakers}",
                    "--rate=24000",
                    "--channels=1",
                    "--format=s16le",
                    "--latency-msec=10",
                    "/dev/zero",
                ],  # fmt: skip
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except BaseException:
            self.close()
            raise
        self.env = {"PULSE_SOURCE": f"{self.mic}.monitor", "PULSE_SINK": self.speakers}

    @contextmanager
    def entered(self) -> Iterator[None]:
        """PortAudio streams opened inside are the room's (this process's environment)."""
        saved = {name: os.environ.get(name) for name in self.env}
        os.environ.update(self.env)
        try:
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def mouth_and_speakers(self, settings: Settings, closing: ExitStack) -> tuple[Player, Session]:
        """The user's mouth (a player into the microphone, 24 kHz) and the assistant's
        session on the speakers (warmed up, no keys), both closed by ``closing``."""
        from voicecli.audio.player import Player
        from voicecli.session import Session

        with self.entered():
            os.environ["PULSE_SINK"] = self.mic
            mouth = Player(24_000)
            closing.callback(mouth.close)
            os.environ["PULSE_SINK"] = self.speakers
            session = closing.enter_context(Session(settings, keys=False, warm_up=True))
        return mouth, session

    def _load(self, args: str) -> str:
        out = subprocess.run(
            ["pactl", "load-module", *args.split()], capture_output=True, text=True
        )
        if out.returncode != 0:
            raise VoiceCliError(f"pactl load-module failed: {out.stderr.strip()}")
        index = out.stdout.strip()
        self.modules.append(index)
        return index

    def echo(self, gain_db: float = ECHO_GAIN_DB) -> None:
        """The speakers reach the microphone, a loopback's latency late and ``gain_db``
        louder."""
        index = self._load(
            f"module-loopback source={self.speakers}.monitor sink={self.mic} "
            "latency_msec=60 source_dont_move=true sink_dont_move=true"
        )
        listed = subprocess.run(
            ["pactl", "-f", "json", "list", "sink-inputs"], capture_output=True, text=True
        )
        inputs = json.loads(listed.stdout or "[]")
        ours = [i["index"] for i in inputs if str(i.get("owner_module")) == index]
        if not ours:
            raise VoiceCliError(f"The echo's loopback is not among the sink inputs: {inputs}")
        subprocess.run(
            ["pactl", "set-sink-input-volume", str(ours[0]), f"{gain_db:g}dB"], check=True
        )

    def say(self, path: Path) -> None:
        """Speak into the microphone (returns once it has been played)."""
        subprocess.run(["paplay", f"--device={self.mic}", str(path)], check=True)

    def start_saying(self, path: Path) -> tuple[subprocess.Popen, float]:
        """Start speaking into the microphone: the player, and when it started."""
        started = time.monotonic()
        return subprocess.Popen(["paplay", f"--device={self.mic}", str(path)]), started

    def wait_for_speakers(self, sounded: float, quiet: float = 0.0, timeout: float = 60.0) -> None:
        """Return once the speakers have sounded for ``sounded`` seconds in all and then,
        if ``quiet``, been silent that long: when the user would answer a question, or
        talk over a reply, whatever the machine's load made of its timing."""
        rate = 16_000
        block = rate // 50
        listener = subprocess.Popen(
            [
                "parec",
                f"--device={self.speakers}.monitor",
                f"--rate={rate}",
                "--channels=1",
                "--format=s16le",
                "--latency-msec=20",
            ],  # fmt: skip
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            loud = silent = 0.0
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                data = listener.stdout.read(block * 2) if listener.stdout else b""
                if not data:
                    break
                samples = np.frombuffer(data, "<i2")
                seconds = len(samples) / rate
                if samples.size and np.abs(samples).max() > 300:  # about -40 dBFS
                    loud, silent = loud + seconds, 0.0
                else:
                    silent += seconds
                if loud >= sounded and silent >= quiet:
                    return
            raise VoiceCliError(
                f"The speakers sounded {loud:.1f} s within {timeout:g} s, not {sounded:g} s "
                f"and then {quiet:g} s of quiet."
            )
        finally:
            listener.kill()
            listener.wait()

    def close(self) -> None:
        if self.keepalive is not None:
            self.keepalive.kill()
            self.keepalive.wait()
        for index in reversed(self.modules):
            subprocess.run(["pactl", "unload-module", index], capture_output=True)
