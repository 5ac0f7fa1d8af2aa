"""Where a turn's audio goes: the device (audio.player.Player), a WAV file, or both.

Every sink takes sentence boundaries as well as samples, so that "first
samples played" is reported per sentence by whatever is closest to the
listener: the device callback when playing, the file write otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from voicecli.audio.wav import WavWriter
from voicecli.cancel import CancelToken

PlayedHook = Callable[[int, float], None]


class WavSink:
    """A file: 'played' means written, and nothing is paced."""

    def __init__(self, path: Path, sample_rate: int) -> None:
        self.writer = WavWriter(path, sample_rate)
        self._on_played: PlayedHook | None = None
        self._pending: int | None = None

    def set_hooks(self, on_played: PlayedHook | None, on_underrun) -> None:
        self._on_played = on_played

    def begin_turn(self) -> None:
        pass

    def begin_sentence(self, sentence: int) -> None:
        self._pending = sentence

    def write(self, samples: np.ndarray, cancel: CancelToken) -> None:
        self.writer.write(samples)
        if self._pending is not None and self._on_played is not None:
            self._on_played(self._pending, time.monotonic())
        self._pending = None

    def end_sentence(self) -> None:
        pass

    def drain(self, cancel: CancelToken) -> bool:
        return not cancel.cancelled

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.writer.close()


class TeeSink:
    """Several sinks in order; the first one paces and reports."""

    def __init__(self, *sinks) -> None:
        self.sinks = sinks

    def set_hooks(self, on_played, on_underrun) -> None:
        for i, sink in enumerate(self.sinks):
            sink.set_hooks(on_played if i == 0 else None, on_underrun if i == 0 else None)

    def begin_turn(self) -> None:
        for sink in self.sinks:
            sink.begin_turn()

    def begin_sentence(self, sentence: int) -> None:
        for sink in self.sinks:
            sink.begin_sentence(sentence)

    def write(self, samples: np.ndarray, cancel: CancelToken) -> None:
        # The file first: it never blocks, while the device may wait for room.
        for sink in reversed(self.sinks):
            sink.write(samples, cancel)

    def end_sentence(self) -> None:
        for sink in self.sinks:
            sink.end_sentence()

    def drain(self, cancel: CancelToken) -> bool:
        return all([sink.drain(cancel) for sink in self.sinks])

    def flush(self) -> None:
        for sink in self.sinks:
            sink.flush()

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    # The pacing sink is the listener's: heard-text tracking follows it.
    def spans(self):
        return self.sinks[0].spans()

    def heard_position(self) -> int:
        return self.sinks[0].heard_position()

    # Playback controls belong to the device; the file keeps every sample regardless.
    def pause(self) -> None:
        self.sinks[0].pause()

    def resume(self) -> None:
        self.sinks[0].resume()

    @property
    def paused(self) -> bool:
        return self.sinks[0].paused

    def skip_sentence(self) -> bool:
        return self.sinks[0].skip_sentence()


def make_sink(settings, sample_rate: int):
    """The device, the WAV file, or both (--output with --play)."""
    from voicecli.audio.player import Player

    play = settings.play if settings.play is not None else settings.output is None
    sinks = []
    if play:
        sinks.append(
            Player(
                sample_rate,
                device=settings.device,
                blocksize=settings.blocksize,
                capacity_seconds=settings.max_audio_ahead,
            )
        )
    if settings.output is not None:
        try:
            sinks.append(WavSink(settings.output, sample_rate))
        except Exception:
            for sink in sinks:
                sink.close()
            raise
    if not sinks:
        from voicecli.errors import VoiceCliError

        raise VoiceCliError("Nothing to do with the audio: --no-play needs --output FILE.wav.")
    return sinks[0] if len(sinks) == 1 else TeeSink(*sinks)
