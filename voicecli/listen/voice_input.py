"""Hands-free input for ``chat --listen``: the microphone's frames go through the VAD and
the turn detector on one thread, and each finished utterance is transcribed on another
(so the microphone is never left unread while Whisper works). Transcription starts when
the user pauses, while the hangover runs, and is kept if the turn ends there: the user
waits for the hangover, not for the hangover and then Whisper. What was said comes out
of ``heard`` as ``Heard`` items; silence and noise that Whisper makes no words of never
do.

While the assistant speaks, the microphone also hears the speakers. On speakers an echo
canceller (``echo``) takes them out of what the microphone hears, and a frame no louder
than their echo is heard as silence, whatever AEC3 leaked of it; with headphones there
is no echo to take out. Either way speech that starts while a reply plays is a barge-in
(``barge_in``): its onset (two frames of it) holds the reply, which is cut once the speech
lasts long enough to be a turn, or goes on if it was not. With neither, the input is muted for the
turn and a short tail after it (``mute``).
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from voicecli.errors import VoiceCliError
from voicecli.frames import HEARING_FRAME_SECONDS
from voicecli.listen.asr import Transcriber, Transcript
from voicecli.listen.echo import EchoCanceller
from voicecli.listen.mic import SILENT_DB, Microphone, level_db
from voicecli.listen.turns import (
    Event,
    Pausing,
    Resumed,
    SpeechDropped,
    SpeechOnset,
    SpeechStarted,
    TurnDetector,
    UserSpeech,
)
from voicecli.listen.vad import VoiceActivity

log = logging.getLogger(__name__)

WORD = re.compile(r"\w")
# Speech after the speakers stop still echoes in a room for a moment.
ECHO_TAIL = 0.3
# Push-to-talk: a terminal reports no key releases, only the repeats of a held key. The
# first repeat comes after the keyboard's repeat delay (X11's default is 660 ms), so the
# key counts as held until this long after the last one came.
HOLD_RELEASE = 0.7


@dataclass(frozen=True)
class Heard:
    text: str
    seconds: float  # of speech
    capped: bool  # cut at max_utterance while the user was still speaking
    ended: float  # time.monotonic() when the speech ended (the hangover is after it)
    turned: float  # ...when the end of the turn was decided
    transcribed: float  # ...and when its transcript was ready


@dataclass(frozen=True)
class Guess:
    """What the user said, as it stands at a pause (``guesses``): the turn's transcript
    if the hangover ends it there, so a reply can be prepared meanwhile. The ``Heard``
    that follows says what the turn was; ``SpokeOn`` comes first if speech went on."""

    text: str


@dataclass(frozen=True)
class SpokeOn:
    """The user spoke again after the last ``Guess``: it was not the turn."""


class BargeIn(Protocol):
    """What speech does to a reply that is playing (called on the microphone's thread;
    each must return at once)."""

    def onset(self) -> None:
        """Maybe speech: hold the reply."""

    def confirmed(self) -> None:
        """Speech: cut the reply, as a key does."""

    def dropped(self) -> None:
        """Not speech after all: let a held reply go on."""


@dataclass(frozen=True)
class InputFailed:
    """Something the user said was lost (``fatal``: the microphone stopped, and only
    typed input works from now on)."""

    message: str
    fatal: bool = True


class VoiceInput:
    def __init__(
        self,
        transcriber: Transcriber,
        microphone: Microphone,
        *,
        hangover: float,
        max_seconds: float,
        barge_in: BargeIn | None = None,
        push_to_talk: bool = False,
        echo: EchoCanceller | None = None,
        guesses: bool = False,
    ) -> None:
        """``push_to_talk``: only what is said while a key is held (``hold``) is heard,
        and letting go ends the turn. ``echo``: what the speakers play is taken out of
        every frame before anything else hears it. ``guesses``: ``heard`` also says what
        was said at each pause (``Guess``, ``SpokeOn``)."""
        self.transcriber = transcriber
        self.mic = microphone
        self.echo = echo
        self.vad = VoiceActivity()
        self.turns = TurnDetector(hangover=hangover, max_seconds=max_seconds)
        self.barge_in = barge_in
        self._onset_open = False  # barge_in heard an onset, and nothing of it since
        self.heard: queue.Queue[Heard | Guess | SpokeOn | InputFailed] = queue.Queue()
        self.guesses = guesses
        # The pause whose transcript may still become a Guess, and whether one did: the
        # two threads decide under the lock, so SpokeOn never comes before its Guess.
        self._pause: tuple[float, float] | None = None
        self._guessed = False
        self._guess_lock = threading.Lock()
        self.level_db = SILENT_DB  # the last frame's (echo taken out), for a meter
        self.hearing = False  # the user is speaking (a turn is open)
        self.transcribing = 0  # utterances waiting for or in Whisper
        self._count = threading.Lock()  # transcribing changes on both threads
        self._muted_until: float | None = None  # None: not muted
        self._was_muted = False
        self.push_to_talk = push_to_talk
        self._held_until = 0.0  # push-to-talk: the key counts as held until then
        self._was_held = False
        self._dropped = 0  # microphone frames lost, as last logged
        # (utterance, when its speech ended, when its turn did, final): a Pausing's turn
        # is transcribed while the hangover runs, and reused if the turn ends as it was.
        self._utterances: queue.Queue[tuple[UserSpeech, float, float, bool] | None] = queue.Queue(8)
        self._early: tuple[tuple[float, float], Transcript] | None = None
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._listen, name="voicecli-mic", daemon=True),
            threading.Thread(target=self._transcribe, name="voicecli-asr", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def mute(self, muted: bool) -> None:
        """Muted: frames are heard by no one (the speakers' echo). Unmuting takes effect
        ``ECHO_TAIL`` later."""
        if muted:
            self._muted_until = float("inf")
        elif self._muted_until is not None:
            self._muted_until = time.monotonic() + ECHO_TAIL

    def hold(self) -> None:
        """The push-to-talk key is down (a press, or one of its repeats)."""
        self._held_until = time.monotonic() + HOLD_RELEASE

    @property
    def held(self) -> bool:
        return time.monotonic() < self._held_until

    @property
    def closed(self) -> bool:
        """Closed, or its microphone's thread has ended (``heard`` says why)."""
        return self._stop.is_set() or not self._threads[0].is_alive()

    def close(self) -> None:
        self._stop.set()
        self.mic.close()
        self._utterances.put(None)
        for thread in self._threads:
            thread.join(2.0)

    def _listen(self) -> None:
        try:
            while not self._stop.is_set():
                frame = self.mic.read()
                if frame is None:
                    continue
                if self.mic.dropped > self._dropped:  # the reader fell 10 s behind
                    log.warning("%d microphone frames lost", self.mic.dropped - self._dropped)
                    self._dropped = self.mic.dropped
                samples = frame.samples
                if self.echo is not None:
                    samples = self.echo(samples, frame.at)
                    self.level_db = level_db(samples)
                else:
                    self.level_db = frame.level_db
                if self._muted(frame.at):
                    if self.turns.in_turn:
                        self._forget_pause(spoke_on=True)  # the turn will not end now
                    self.turns.reset()
                    self.hearing = False
                    self._was_muted = True
                    if self._onset_open:
                        self._handle([SpeechDropped()], frame.at)
                    continue
                if self._was_muted:
                    self._was_muted = False
                    self.vad.reset()
                if self.push_to_talk:
                    held = frame.at < self._held_until
                    if not held:
                        if self._was_held:  # let go: the turn ends now, not after a hangover
                            self._handle(self.turns.flush(), frame.at)
                            self.hearing = False
                        self._was_held = False
                        continue
                    if not self._was_held:
                        self.vad.reset()
                        self._was_held = True
                probability = self.vad(samples)  # always: its state follows the stream
                if self.echo is not None and self.echo.only_echo:
                    probability = 0.0  # what AEC3 leaked is the assistant's voice
                self._handle(self.turns.push(samples, probability), frame.at)
        except VoiceCliError as exc:
            self.heard.put(InputFailed(str(exc)))
        except Exception as exc:  # noqa: BLE001 - never die silently: typed input goes on
            log.exception("voice input failed")
            self.heard.put(InputFailed(f"Voice input stopped: {type(exc).__name__}: {exc}"))

    def _muted(self, at: float) -> bool:
        """Whether the frame captured at ``at`` is heard by no one: muted by the caller
        while a reply plays, or echo a canceller has not yet learnt to take out."""
        if self.echo is not None and not self.echo.settled:
            return True
        if self._muted_until is not None:
            if at < self._muted_until:
                return True
            self._muted_until = None
        return False

    def _handle(self, events: list[Event], at: float) -> None:
        """What the turn detector made of the frame captured at ``at``."""
        barge_in = self.barge_in
        for event in events:
            if isinstance(event, SpeechOnset):
                self._onset_open = True
                if barge_in is not None:
                    barge_in.onset()
            elif isinstance(event, SpeechDropped):
                self._onset_open = False
                if barge_in is not None:
                    barge_in.dropped()
            elif isinstance(event, SpeechStarted):
                self.hearing = True
                self._onset_open = False
                if barge_in is not None:
                    barge_in.confirmed()
            elif isinstance(event, Pausing):
                with self._guess_lock:
                    self._pause = _speech(event.utterance)
                try:
                    self._utterances.put_nowait((event.utterance, 0.0, 0.0, False))
                except queue.Full:
                    pass  # only a head start: the final utterance still comes
            elif isinstance(event, Resumed):
                self._forget_pause(spoke_on=True)
            else:
                self._forget_pause(spoke_on=False)  # the Heard that follows says what it was
                self.hearing = self.turns.in_turn
                # The speech ended this long before the frame that ended the turn.
                ended = at + HEARING_FRAME_SECONDS - (self.turns.seconds - event.end)
                self._hand_on(event, ended)

    def _forget_pause(self, *, spoke_on: bool) -> None:
        with self._guess_lock:
            if spoke_on and self._guessed:
                self.heard.put(SpokeOn())
            self._pause, self._guessed = None, False

    def _guess(self, key: tuple[float, float], transcript: Transcript) -> None:
        """A pause's transcript, if the pause is still the last thing heard."""
        self._early = (key, transcript)
        if not self.guesses or not WORD.search(transcript.text):
            return
        with self._guess_lock:
            if self._pause == key:
                self._guessed = True
                self.heard.put(Guess(transcript.text))

    def _counted(self, change: int) -> None:
        with self._count:
            self.transcribing += change

    def _hand_on(self, utterance: UserSpeech, ended: float) -> None:
        self._counted(1)
        try:
            self._utterances.put_nowait((utterance, ended, time.monotonic(), True))
        except queue.Full:  # Whisper is 8 utterances behind: say so rather than queue more
            self._counted(-1)
            self.heard.put(
                InputFailed("Speech came faster than it could be transcribed.", fatal=False)
            )

    def _transcribe(self) -> None:
        while True:
            item = self._utterances.get()
            if item is None:
                return
            utterance, ended, turned, final = item
            key = _speech(utterance)
            if not final:
                with self._guess_lock:
                    if self._pause != key:
                        continue  # the user spoke on while it waited: a stale pause
            try:
                if self._early is not None and self._early[0] == key:
                    transcript = self._early[1]  # the turn ended as it was when paused
                else:
                    transcript = self.transcriber.transcribe(utterance.audio)
            except Exception as exc:  # noqa: BLE001
                if final:
                    log.warning("transcription failed: %r", exc)
                    message = f"Could not transcribe what was said: {type(exc).__name__}."
                    self.heard.put(InputFailed(message, fatal=False))
                continue
            finally:
                if final:
                    self._counted(-1)
            if not final:
                self._guess(key, transcript)
                continue
            self._early = None
            if WORD.search(transcript.text):
                self.heard.put(
                    Heard(
                        transcript.text,
                        utterance.end - utterance.start,
                        utterance.capped,
                        ended,
                        turned,
                        time.monotonic(),
                    )
                )
            else:
                log.info("no words in %.1f s of sound", utterance.seconds)


def _speech(utterance: UserSpeech) -> tuple[float, float]:
    """Which speech an utterance holds: a pause's and the turn's are the same speech if
    nothing was said after the pause (the turn's has more silence after it)."""
    return utterance.start, utterance.end
