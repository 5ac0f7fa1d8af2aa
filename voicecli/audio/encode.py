"""Audio encoded as it is made, for a client that reads a stream: MP3, Opus (in Ogg),
AAC (ADTS), FLAC, WAV or raw PCM, through PyAV (FFmpeg's encoders and muxers).

A stream's length is unknown while it is written, so nothing is written back into a
header: FFmpeg's WAV muxer then gives the RIFF and data chunk sizes as 0xFFFFFFFF, the
usual mark of a WAV stream, and FLAC's stream info leaves the total samples unset.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from voicecli.protocol import to_pcm16


class AudioFormat(enum.StrEnum):
    MP3 = "mp3"
    OPUS = "opus"
    AAC = "aac"
    FLAC = "flac"
    WAV = "wav"
    PCM = "pcm"  # s16le mono at the synthesizer's rate, no header


@dataclass(frozen=True)
class _Codec:
    container: str
    codec: str
    media_type: str
    options: tuple[tuple[str, str], ...] = ()  # the muxer's


_CODECS = {
    AudioFormat.MP3: _Codec("mp3", "libmp3lame", "audio/mpeg"),
    # Ogg pages hold a second of audio by default: a tenth, so a page leaves soon.
    AudioFormat.OPUS: _Codec("ogg", "libopus", "audio/ogg", (("page_duration", "100000"),)),
    AudioFormat.AAC: _Codec("adts", "aac", "audio/aac"),
    AudioFormat.FLAC: _Codec("flac", "flac", "audio/flac"),
    AudioFormat.WAV: _Codec("wav", "pcm_s16le", "audio/wav"),
}


def media_type(fmt: AudioFormat, sample_rate: int) -> str:
    if fmt is AudioFormat.PCM:
        return f"audio/pcm;rate={sample_rate}"
    return _CODECS[fmt].media_type


class _Written:
    """The muxer's output, taken as it comes; not seekable, so nothing is rewritten."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, data: Any) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts.clear()
        return data


class StreamEncoder:
    """``encode`` mono float32 samples as they come, then ``finish``: each returns the
    bytes that are ready (some encoders hold a frame's worth back until then)."""

    def __init__(self, fmt: AudioFormat, sample_rate: int) -> None:
        self.format = AudioFormat(fmt)
        self.sample_rate = sample_rate
        self.media_type = media_type(self.format, sample_rate)
        self._out: _Written | None = None
        self._container: Any = None
        self._stream: Any = None
        self._pts = 0
        if self.format is not AudioFormat.PCM:
            import av

            codec = _CODECS[self.format]
            self._out = _Written()
            self._container = av.open(
                self._out, mode="w", format=codec.container, options=dict(codec.options)
            )
            self._stream = self._container.add_stream(codec.codec, rate=sample_rate, layout="mono")

    def encode(self, samples: np.ndarray) -> bytes:
        samples = np.ascontiguousarray(samples, dtype=np.float32).reshape(-1)
        if self.format is AudioFormat.PCM:
            return to_pcm16(samples)
        if self._stream is None:
            raise ValueError("the stream is finished")
        if samples.size == 0:
            return b""
        import av

        frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt", layout="mono")
        frame.sample_rate = self.sample_rate
        frame.pts = self._pts
        self._pts += samples.size
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._out.take() if self._out is not None else b""

    def finish(self) -> bytes:
        """The rest: what the encoder held back, and the container's trailer."""
        if self._stream is None:
            return b""
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        self._stream = None
        return self._out.take() if self._out is not None else b""

    def close(self) -> None:
        """Give the encoder up without its trailer (the client went away)."""
        if self._container is not None and self._stream is not None:
            self._stream = None
            try:
                self._container.close()
            except Exception:  # noqa: BLE001 - nothing is left to write to anyway
                pass
