"""Where a turn's audio goes: the device (``audio.player.Player``), a WAV file, or the
device with the file chained after it.

Every sink sees whole chunks, sentence index included, so that "first samples played" is
reported per sentence by whatever is closest to the listener: the device callback when
playing, the file write otherwise.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from voicecli.audio.ledger import SpanLedger
from voicecli.audio.player import Player
from voicecli.audio.wav import WavWriter
from voicecli.cancel import CancelToken
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.frames import (
    AudioChunk,
    AudioSink,
    Playback,
    PlayedHook,
    SinkCapabilities,
    UnderrunHook,
)


class WavSink(AudioSink):
    """A file: 'played' means written, nothing is paced, and every sample is 'heard'."""

    capabilities = SinkCapabilities(paced=False)

    def __init__(self, path: Path, sample_rate: int) -> None:
        super().__init__()
        self.sample_rate = sample_rate
        self.writer = WavWriter(path, sample_rate)
        self._on_played: PlayedHook | None = None
        self._ledger = SpanLedger()
        self._unplayed: int | None = None  # sentence begun whose first samples are not out

    def _begin_turn(self, on_played: PlayedHook | None, on_underrun: UnderrunHook | None) -> None:
        self._on_played = on_played
        self._ledger.reset()

    def _write(self, chunk: AudioChunk, cancel: CancelToken | None) -> None:
        if self._ledger.before_write(chunk, self.writer.frames):
            self._unplayed = chunk.sentence
        if chunk.samples.size:
            self.writer.write(chunk.samples)
            if self._unplayed == chunk.sentence and self._on_played is not None:
                self._on_played(chunk.sentence, time.monotonic())
            self._unplayed = None
        self._ledger.after_write(chunk, self.writer.frames)

    def playback(self) -> Playback:
        return Playback(self._ledger.snapshot(), self.writer.frames, self.sample_rate)

    def recording(self) -> Playback | None:
        return self.playback()  # spans start where their samples are in the file

    def _describe(self) -> dict[str, Any]:
        return {"kind": "wav", "path": str(self.writer.path)}

    def _close(self) -> None:
        self.writer.close()


def make_sink(settings: Settings, sample_rate: int) -> AudioSink:
    """The device, the WAV file, or the device with the file chained (--output --play)."""
    if not settings.plays:
        if settings.output is None:
            raise VoiceCliError("Nothing to do with the audio: --no-play needs --output FILE.wav.")
        return WavSink(settings.output, sample_rate)
    file = WavSink(settings.output, sample_rate) if settings.output is not None else None
    try:
        return Player(
            sample_rate,
            device=settings.device,
            blocksize=settings.blocksize,
            capacity_seconds=settings.max_audio_ahead,
            next_in_chain=file,
        )
    except BaseException:
        if file is not None:
            file.close()
        raise
