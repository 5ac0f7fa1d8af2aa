"""Speech through the resident engine (``EngineSynthesizer``): a ``WebSocketSynthesizer``
on the engine's socket that starts the engine on first use, waits its turn while the
engine speaks for as many others as it can, and, if the engine dies mid-turn, says so
and finishes the turn in this process without losing a sentence."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

import numpy as np

from voicecli.cancel import CancelToken
from voicecli.config import Settings
from voicecli.engine.handle import EngineHandle, EngineUnavailable, Notify
from voicecli.frames import AudioChunk, Sentence, SynthCapabilities, Synthesizer
from voicecli.timeline import Timeline
from voicecli.tts.remote import WebSocketSynthesizer
from voicecli.tts.remote_turn import ConnectionLost, ServerBusy
from voicecli.tts.voices import VoiceSpec, check_voice_name

# A ping the engine leaves unanswered this long: it is stopped, or its loop is stuck.
PING_SECONDS = 1.0
# Silence while a sentence is unanswered: its scheduler is stuck (its loop still answers
# pings). Well past what serving its other clients' passes in turn takes.
SENTENCE_STALL_SECONDS = 10.0
# How long a command waits for a place while the engine speaks for its other clients (a
# second `say` waits for the first, as a queue would), and how often it asks again.
PLACE_WAIT_SECONDS = 300.0
PLACE_RETRY_SECONDS = 0.5


class EngineSynthesizer:
    """Speech from the resident engine, with the in-process synthesizer as a fallback
    for a turn whose engine died, stopped or hangs: the sentences it had not finished
    are spoken in-process, from the sample the listener had reached, so no text is lost;
    an engine that does not answer at the start of a turn gives the whole turn to this
    process. With ``wait_for_place`` a turn the engine has no place for waits for one;
    without it (a web page's tab, which says so to its user), the refusal is the
    turn's error."""

    sample_rate = WebSocketSynthesizer.sample_rate
    capabilities = SynthCapabilities(streams_within_sentence=True, word_timings=True)

    def __init__(
        self,
        settings: Settings,
        local: Callable[[], Synthesizer],
        notify: Notify | None = None,
        wait_for_place: bool = True,
    ) -> None:
        self.engine = EngineHandle(settings)
        self.wait_for_place = wait_for_place
        self.settings = settings
        self._local_factory = local
        self._notify = notify
        self._local: Synthesizer | None = None
        self._voices: list[str] | None = None  # the engine's voice set, once it answered
        self._remote = self._connect()
        try:
            info = self.engine.ensure(notify)
        except EngineUnavailable as exc:
            self._fall_back(exc)
        else:
            self._voices = list((info.details or {}).get("voices", []))
        self.set_voice(settings.voice)

    def _connect(self) -> WebSocketSynthesizer:
        return WebSocketSynthesizer(
            "ws://voicecli-engine",
            voice=self.settings.voice,
            speed=self.settings.speed,
            unix_socket=str(self.engine.socket),
            where="the voicecli engine",
            ping_interval=PING_SECONDS,
            read_timeout=SENTENCE_STALL_SECONDS,
        )

    def _fall_back(self, why: Exception) -> Synthesizer:
        """Speak in this process from now on, saying why once."""
        if self._notify is not None:
            self._notify(f"{why} Finishing in this process.")
        if self._local is None:
            self._local = self._local_factory()
            if self._remote.voice is not None:
                self._local.set_voice(self._remote.voice)
            if self._remote.speed is not None:
                self._local.set_speed(self._remote.speed)
        return self._local

    def set_voice(self, voice: str) -> None:
        """Checked now against the engine's voice set, as the local synthesizer does."""
        if self._voices is not None:
            for name, _ in VoiceSpec.parse(voice).parts:
                check_voice_name(name, self._voices)
        self._remote.set_voice(voice)
        if self._local is not None:
            self._local.set_voice(voice)

    def set_speed(self, speed: float) -> None:
        self._remote.set_speed(speed)
        if self._local is not None:
            self._local.set_speed(speed)

    def warm_up(self) -> None:
        """The engine warms itself up once it is idle."""

    def describe(self) -> dict[str, Any]:
        return {**self._remote.describe(), "kind": "engine", "socket": str(self.engine.socket)}

    def close(self) -> None:
        if self._local is not None:
            self._local.close()

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        unfinished: dict[int, Sentence] = {}  # sent to the engine, not yet all heard back
        received: dict[int, int] = {}  # samples of each that came back

        def handed(source: Iterable[Sentence]) -> Iterator[Sentence]:
            for sentence in source:
                unfinished[sentence.index] = sentence
                yield sentence

        iterator = iter(sentences)
        local = self._local
        waiting_since: float | None = None
        while local is None:
            # Sent before and not all heard: sent again, and heard on from where it was.
            pending = [unfinished[i] for i in sorted(unfinished)]
            try:
                # The engine may have idled out or died between turns: start it again.
                self.engine.ensure(self._notify)
                for chunk in self._remote.stream(
                    handed(_chain(pending, iterator)), cancel, timeline
                ):
                    heard = received.get(chunk.sentence, 0)
                    if chunk.last:
                        unfinished.pop(chunk.sentence, None)
                    else:
                        received[chunk.sentence] = max(heard, chunk.offset + len(chunk.samples))
                    yield from _after(chunk, heard) if heard else (chunk,)
                return
            except ServerBusy:
                now = time.monotonic()
                if waiting_since is None:
                    waiting_since = now
                    if self.wait_for_place and self._notify is not None:
                        self._notify("The voicecli engine is speaking for others: waiting.")
                if not self.wait_for_place or now - waiting_since > PLACE_WAIT_SECONDS:
                    raise
                if cancel.wait(PLACE_RETRY_SECONDS):
                    return
            except (ConnectionLost, EngineUnavailable) as exc:
                if cancel.cancelled:
                    return
                local = self._fall_back(exc)
        pending = [unfinished[i] for i in sorted(unfinished)]
        for chunk in local.stream(_chain(pending, iterator), cancel, timeline):
            yield from _after(chunk, received.get(chunk.sentence, 0))


def _chain(first: list[Sentence], rest: Iterator[Sentence]) -> Iterator[Sentence]:
    yield from first
    yield from rest


def _after(chunk: AudioChunk, heard: int) -> Iterator[AudioChunk]:
    """``chunk`` less what the listener already got of its sentence (``heard``
    samples), so that a sentence finished in-process continues where it stopped."""
    end = chunk.offset + len(chunk.samples)
    if chunk.last or end > heard:
        skip = max(0, heard - chunk.offset)
        words = tuple(w for w in chunk.words if w.start >= heard)
        samples = chunk.samples[skip:] if skip else chunk.samples
        offset = max(chunk.offset, heard) if not chunk.last else max(end, heard)
        yield replace(chunk, samples=np.asarray(samples), offset=offset, words=words)
