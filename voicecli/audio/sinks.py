"""Where a turn's audio goes: the device (audio.player.Player), a WAV file, or both.

Every sink sees whole chunks, sentence index included, so that "first samples
played" is reported per sentence by whatever is closest to the listener: the
device callback when playing, the file write otherwise.
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
    OutputHook,
    Playback,
    PlayedHook,
    SinkCapabilities,
    UnderrunHook,
)


class WavSink:
    """A file: 'played' means written, nothing is paced, and every sample is 'heard'."""

    capabilities = SinkCapabilities(paced=False)

    def __init__(self, path: Path, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.writer = WavWriter(path, sample_rate)
        self._on_played: PlayedHook | None = None
        self._ledger = SpanLedger()
        self._unplayed: int | None = None  # sentence begun whose first samples are not out

    def begin_turn(self, on_played: PlayedHook | None, on_underrun: UnderrunHook | None) -> None:
        self._on_played = on_played
        self._ledger.reset()

    def write(self, chunk: AudioChunk, cancel: CancelToken) -> None:
        if self._ledger.before_write(chunk, self.writer.frames):
            self._unplayed = chunk.sentence
        if chunk.samples.size:
            self.writer.write(chunk.samples)
            if self._unplayed == chunk.sentence and self._on_played is not None:
                self._on_played(chunk.sentence, time.monotonic())
            self._unplayed = None
        self._ledger.after_write(chunk, self.writer.frames)

    def drain(self, cancel: CancelToken) -> bool:
        return not cancel.cancelled

    def clear(self) -> None:
        pass  # what was written stays in the file

    def playback(self) -> Playback:
        return Playback(self._ledger.snapshot(), self.writer.frames, self.sample_rate)

    def recording(self) -> Playback | None:
        return self.playback()  # spans start where their samples are in the file

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    @property
    def paused(self) -> bool:
        return False

    def skip_sentence(self) -> bool:
        return False

    def monitor(self, hook: OutputHook | None) -> None:
        pass  # nobody listens to a file as it is written: no echo to cancel

    def describe(self) -> dict[str, Any]:
        return {"kind": "wav", "path": str(self.writer.path)}

    def close(self) -> None:
        self.writer.close()


class TeeSink:
    """A device and a file. The device paces and reports, and its listener's controls
    and play position are the tee's; the file keeps every sample regardless."""

    def __init__(self, device: Player, file: WavSink) -> None:
        self.device = device
        self.file = file
        self.capabilities = device.capabilities

    def begin_turn(self, on_played: PlayedHook | None, on_underrun: UnderrunHook | None) -> None:
        self.device.begin_turn(on_played, on_underrun)
        self.file.begin_turn(None, None)

    def write(self, chunk: AudioChunk, cancel: CancelToken) -> None:
        # The file first: it never blocks, while the device may wait for room.
        self.file.write(chunk, cancel)
        self.device.write(chunk, cancel)

    def drain(self, cancel: CancelToken) -> bool:
        return self.device.drain(cancel)

    def clear(self) -> None:
        self.device.clear()

    def playback(self) -> Playback:
        return self.device.playback()

    def recording(self) -> Playback | None:
        return self.file.recording()

    def pause(self) -> None:
        self.device.pause()

    def resume(self) -> None:
        self.device.resume()

    @property
    def paused(self) -> bool:
        return self.device.paused

    def skip_sentence(self) -> bool:
        return self.device.skip_sentence()

    def monitor(self, hook: OutputHook | None) -> None:
        self.device.monitor(hook)

    def describe(self) -> dict[str, Any]:
        return {**self.device.describe(), "also_written_to": str(self.file.writer.path)}

    def close(self) -> None:
        self.device.close()
        self.file.close()


def make_sink(settings: Settings, sample_rate: int) -> AudioSink:
    """The device, the WAV file, or both (--output with --play)."""
    play = settings.plays
    if not play and settings.output is None:
        raise VoiceCliError("Nothing to do with the audio: --no-play needs --output FILE.wav.")
    device = None
    if play:
        device = Player(
            sample_rate,
            device=settings.device,
            blocksize=settings.blocksize,
            capacity_seconds=settings.max_audio_ahead,
        )
    if settings.output is None:
        return device
    try:
        file = WavSink(settings.output, sample_rate)
    except BaseException:
        if device is not None:
            device.close()
        raise
    return file if device is None else TeeSink(device, file)
