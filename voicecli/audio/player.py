"""Playback through a sounddevice OutputStream whose callback drains a ring buffer.

The callback never blocks and never raises: when the ring runs dry it plays
silence and counts an underrun. Sentence markers placed at write positions
let the callback report when each sentence's first sample reaches the DAC,
and let callers map the play position back to the sentences really heard.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

from voicecli.audio.devices import NO_DEVICE_HINT, resolve_device, sounddevice_module
from voicecli.audio.ledger import SpanLedger
from voicecli.audio.ring import RingBuffer
from voicecli.cancel import CancelToken
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

log = logging.getLogger(__name__)

# A live stream calls back every block, silence included (paused or not), so this long
# without a callback means the device is gone; generous because a new PulseAudio
# stream may stall for a second or two.
STALL_SECONDS = 5.0


class Player(AudioSink):
    """Owns the ring buffer and the output stream for one session."""

    capabilities = SinkCapabilities(paced=True, pause=True, skip=True, monitor=True)

    def __init__(
        self,
        sample_rate: int,
        *,
        device: str | int | None = None,
        blocksize: int = 480,
        capacity_seconds: float = 10.0,
        latency: str | float = "low",
        next_in_chain: AudioSink | None = None,
    ) -> None:
        super().__init__(next_in_chain)
        self.sample_rate = sample_rate
        self.blocksize = blocksize
        self.ring = RingBuffer(int(capacity_seconds * sample_rate))
        self.on_played: PlayedHook | None = None
        self.on_underrun: UnderrunHook | None = None
        self._monitor: OutputHook | None = None
        self.underruns = 0
        self.device = resolve_device(device)
        self._markers: deque[tuple[int, int]] = deque()  # (ring position, sentence)
        self._ledger = SpanLedger()
        self._expecting = False  # audio is due: running dry now is an underrun
        self._dry = False  # in an underrun episode (count each episode once)
        self._paused = False
        self._played_pos = 0
        self._cut_pos: int | None = None  # heard position frozen by the last clear
        self._dac_delay = 0.0  # seconds from callback to DAC, from PortAudio's timestamps
        self._discard: int | None = None  # skipped sentence: drop the rest of its samples
        self._last_callback = time.monotonic()
        self._stream = None
        self._stream = self._open(latency)

    def _open(self, latency: str | float):
        sd = sounddevice_module()
        try:
            sd.check_output_settings(
                device=self.device, channels=1, dtype="float32", samplerate=self.sample_rate
            )
            stream = sd.OutputStream(
                samplerate=self.sample_rate,
                blocksize=self.blocksize,
                device=self.device,
                channels=1,
                dtype="float32",
                latency=latency,
                callback=self._callback,
            )
            stream.start()
        except Exception as exc:  # noqa: BLE001 - PortAudioError, ValueError for bad settings
            raise VoiceCliError(
                f"Cannot open audio output device {self.device}: {exc}. {NO_DEVICE_HINT}"
            ) from None
        return stream

    # --- audio thread -------------------------------------------------------------
    def _callback(self, outdata, frames, time_info, status) -> None:
        now = time.monotonic()
        self._last_callback = now
        out = outdata[:, 0]
        try:
            delay = float(time_info.outputBufferDacTime - time_info.currentTime)
        except (AttributeError, TypeError):
            delay = 0.0
        if not 0.0 <= delay < 2.0:  # some hosts report no timestamps
            delay = float(self._stream.latency) if self._stream is not None else 0.0
        self._dac_delay = delay
        if self._paused:
            out.fill(0)
        else:
            self._fill(out, frames, now, delay)
        monitor = self._monitor
        if monitor is not None:
            monitor(out, now + delay)

    def _fill(self, out, frames: int, now: float, delay: float) -> None:
        n, before = self.ring.read_into(out)
        if n < frames:
            out[n:] = 0
            if self._expecting and not self._dry:
                self._dry = True
                self.underruns += 1
                if self.on_underrun is not None:
                    self.on_underrun(now)
        else:
            self._dry = False
        end = before + n
        self._played_pos = end
        markers = self._markers
        while markers and markers[0][0] < end:
            pos, sentence = markers.popleft()
            if pos < before:  # cleared away before it was played
                continue
            if self.on_played is not None:
                self.on_played(sentence, now + delay + (pos - before) / self.sample_rate)

    # --- producer side ------------------------------------------------------------
    def _begin_turn(self, on_played: PlayedHook | None, on_underrun: UnderrunHook | None) -> None:
        self.on_played = on_played
        self.on_underrun = on_underrun
        self._ledger.reset()
        self._markers.clear()
        self._cut_pos = None
        self._discard = None

    def _write(self, chunk: AudioChunk, cancel: CancelToken | None) -> None:
        """Queue a chunk, blocking while max audio ahead is already queued.

        Raises VoiceCliError when the device stops taking audio (unplugged, server gone),
        rather than blocking forever on a ring that never drains.
        """
        if chunk.sentence == self._discard:
            return  # the listener skipped the rest of this sentence
        if self._ledger.before_write(chunk, self.ring.write_pos):
            self._markers.append((self.ring.write_pos, chunk.sentence))
        if chunk.samples.size:
            done = self.ring.write(chunk.samples, _UntilStalled(cancel, self))
            # Only once audio is in: a callback between a sentence's start and its
            # first samples is not an underrun.
            self._expecting = True
            if done < chunk.samples.size and self.stalled():
                raise self._stalled_error()
        self._ledger.after_write(chunk, self.ring.write_pos)

    def monitor(self, hook: OutputHook | None) -> None:
        self._monitor = hook

    def stalled(self) -> bool:
        """The device has stopped calling back: it disappeared or hung."""
        return time.monotonic() - self._last_callback > STALL_SECONDS

    def _stalled_error(self) -> VoiceCliError:
        return VoiceCliError(
            f"The audio output device {self.device} stopped playing (unplugged, or its "
            f"sound server went away). Check it with `voicecli devices`, pick another "
            f"with --device, or {NO_DEVICE_HINT[0].lower()}{NO_DEVICE_HINT[1:]}"
        )

    def drain(self, cancel: CancelToken | None = None, timeout: float | None = None) -> bool:
        """Wait until every queued sample has reached the DAC; False if cancelled or timed out."""
        self._expecting = False  # no more audio is coming: running dry is no underrun now
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.ring.available > 0 or self._paused:
            if cancel is not None and cancel.wait(0.01):
                return False
            if self.stalled():
                raise self._stalled_error()
            if cancel is None:
                time.sleep(0.01)
            if deadline is not None and time.monotonic() > deadline:
                return False
        # The last block still has to travel from the callback to the DAC.
        end = time.monotonic() + self._dac_delay + self.blocksize / self.sample_rate
        while time.monotonic() < end:
            if cancel is not None and cancel.wait(0.005):
                return False
            time.sleep(0.005)
        return True

    def clear(self) -> None:
        """Silence at once: drop the ring and what the host API has scheduled."""
        self._expecting = False
        self._cut_pos = self._heard_position()
        self.ring.clear()
        self._markers.clear()
        self._restart_stream()

    def skip_sentence(self) -> bool:
        """Jump to the next sentence: drop the rest of the one the listener hears now.

        Audio already queued for the next sentence is kept; if it is not queued yet, the
        rest of this sentence is discarded as it arrives. False when nothing is playing.
        """
        heard = self._heard_position()
        current = self._ledger.at(heard)
        if current is None:
            return False
        following = self._ledger.skip(current, heard)
        if following is not None:
            self.ring.skip_to(following)
        else:
            self._discard = current.sentence
            self.ring.clear()  # also makes a writer blocked mid-chunk abandon it
        self._restart_stream()
        return True

    def _restart_stream(self) -> None:
        try:
            # abort() discards buffers already handed to the host; start() reopens.
            self._stream.abort()
            self._stream.start()
        except Exception as exc:  # noqa: BLE001 - device vanished: report, don't crash
            log.warning("audio device error while clearing: %s", exc)

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    def _heard_position(self) -> int:
        """Absolute ring position that has reached the listener (DAC-delay adjusted)."""
        lag = int(self._dac_delay * self.sample_rate)
        heard = max(0, self._played_pos - lag)
        return heard if self._cut_pos is None else min(heard, self._cut_pos)

    def playback(self) -> Playback:
        return Playback(self._ledger.snapshot(), self._heard_position(), self.sample_rate)

    def _describe(self) -> dict[str, Any]:
        sd = sounddevice_module()
        return {
            "kind": "device",
            "device": sd.query_devices(self.device)["name"],
            "index": self.device,
            "blocksize": self.blocksize,
        }

    def _close(self) -> None:
        try:
            self._stream.abort()
            self._stream.close()
        except Exception:  # noqa: BLE001 - closing a vanished device is not an error
            pass


class _UntilStalled:
    """A cancel token for RingBuffer.write that also fires when the device stalls."""

    def __init__(self, cancel: CancelToken | None, player: Player) -> None:
        self._cancel = cancel
        self._player = player

    @property
    def cancelled(self) -> bool:
        return (self._cancel is not None and self._cancel.cancelled) or self._player.stalled()
