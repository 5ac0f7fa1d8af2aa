"""Speech and listening for an agent's tool calls (``voicecli mcp``): the session of
``say`` (through the resident engine, played here) and the listening of ``chat
--listen`` (VAD, turn detection, Whisper, barge-in with the echo cancelled), one call
at a time.

Speech from one call never overlaps the next: a call waits for the speech before it,
even one that did not wait itself. ``stop`` silences whatever speaks, at once, from any
thread. The session opens when the server starts, so that the engine loads while the
agent thinks; a call that comes meanwhile waits for it.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from voicecli.config import Settings
from voicecli.display import TurnView
from voicecli.errors import VoiceCliError
from voicecli.frames import InputFailed, UserTurn
from voicecli.session import Session
from voicecli.text import checked

if TYPE_CHECKING:
    from voicecli.listen.asr import Transcriber
    from voicecli.listen.voice_input import VoiceInput
    from voicecli.pipeline import TurnResult

log = logging.getLogger(__name__)

MAX_LISTEN_SECONDS = 600.0


@dataclass(frozen=True)
class Delivered:
    """What became of one utterance: what the user heard of it, and whether the user (or
    ``stop``) cut it short."""

    heard: str
    interrupted: bool


@dataclass(frozen=True)
class Heard:
    """What the user said."""

    text: str
    seconds: float  # of speech


class AgentVoice:
    def __init__(self, settings: Settings) -> None:
        # Played here, never written to a file: the agent's user hears it.
        self.settings = dataclasses.replace(settings, output=None, captions=None, play=None)
        self._session: Session | None = None
        self._opened = threading.Event()
        self._open_error: VoiceCliError | None = None
        self._order = threading.Lock()  # one utterance at a time, in the order of the calls
        self._speaking = threading.Event()
        self._transcriber: Transcriber | None = None
        self._hearing = threading.Lock()
        threading.Thread(target=self._open, name="voicecli-mcp-open", daemon=True).start()

    # --- the session ----------------------------------------------------------------
    def _open(self) -> None:
        try:
            session = Session(self.settings, keys=False)
            session.__enter__()
            self._session = session
        except VoiceCliError as exc:
            self._open_error = exc
        except Exception as exc:  # noqa: BLE001 - said to the agent, not left in a thread
            log.exception("the speech session failed to open")
            self._open_error = VoiceCliError(f"Speech failed to start ({type(exc).__name__}).")
        finally:
            self._opened.set()

    def session(self) -> Session:
        """The session, once open (the engine may be starting: this waits for it)."""
        self._opened.wait()
        if self._open_error is not None:
            raise self._open_error
        assert self._session is not None
        return self._session

    # --- speaking -------------------------------------------------------------------
    def speak(self, text: str, voice: str | None = None, wait: bool = True) -> Delivered | None:
        """Speak ``text`` (in ``voice`` for this call); with ``wait``, return once it has
        been heard, otherwise at once (None), speaking on meanwhile."""
        text = _text(text)
        session = self.session()
        self._order.acquire()  # after the speech before it
        try:
            restore = self._use_voice(session, voice)
        except BaseException:
            self._order.release()
            raise
        if wait:
            try:
                return self._speak(session, text)
            finally:
                restore()
                self._order.release()

        def speak_on() -> None:
            try:
                self._speak(session, text)
            except VoiceCliError as exc:
                log.warning("speech failed: %s", exc)
            finally:
                restore()
                self._order.release()

        threading.Thread(target=speak_on, name="voicecli-mcp-speak", daemon=True).start()
        return None

    def _use_voice(self, session: Session, voice: str | None):  # noqa: ANN202 - a callback
        assert session.synth is not None
        if voice is None:
            return lambda: None
        session.synth.set_voice(_text(voice))  # checked against the voice set now
        default = self.settings.voice
        return lambda: session.synth.set_voice(default) if session.synth is not None else None

    def _speak(self, session: Session, text: str) -> Delivered:
        self._speaking.set()
        try:
            result: TurnResult = session.speak(
                lambda cancel, timeline: iter([text]), view=TurnView()
            )
        finally:
            self._speaking.clear()
        if result.error is not None:
            raise result.error
        if not result.sentences and not result.interrupted:
            raise VoiceCliError("Nothing to say: the text has no speakable words.")
        heard = result.heard.strip() if result.interrupted else result.text
        return Delivered(heard, result.interrupted)

    def stop(self) -> bool:
        """Silence the speech in progress, if any (from any thread); whether there was."""
        session = self._session
        if session is None or not self._speaking.is_set():
            return False
        session.interrupt("stop")
        return True

    # --- listening ------------------------------------------------------------------
    def listen(self, timeout: float) -> Heard:
        """What the user says next, within ``timeout`` seconds of silence."""
        _check_timeout(timeout)
        session = self.session()
        with self._order:
            voice = self._voice_input(session, barge_in=False)
            try:
                return self._next_turn(voice, timeout)
            finally:
                self._stop_hearing(session, voice)

    def converse(self, text: str, listen: bool, timeout: float) -> tuple[Delivered, Heard | None]:
        """Speak ``text``, then (with ``listen``) hear the answer. Listening starts with
        the speech: the user may talk over it, which cuts it, and what they said is the
        answer."""
        text = _text(text)
        if listen:
            _check_timeout(timeout)
        session = self.session()
        with self._order:
            if not listen:
                return self._speak(session, text), None
            voice = self._voice_input(session, barge_in=True)
            try:
                spoken = self._speak(session, text)
                voice.mute(False)
                return spoken, self._next_turn(voice, timeout)
            finally:
                self._stop_hearing(session, voice)

    def _voice_input(self, session: Session, barge_in: bool) -> VoiceInput:
        from voicecli.listen.mic import Microphone
        from voicecli.listen.user_input import ReplyBargeIn, echo_canceller
        from voicecli.listen.voice_input import VoiceInput

        settings = self.settings
        transcriber = self._whisper()
        microphone = Microphone(settings.input_device)
        try:
            echo = echo_canceller(settings, session) if barge_in else None
        except BaseException:
            microphone.close()
            raise
        # Without headphones or a canceller the microphone would hear the speech itself.
        interrupts = barge_in and settings.barge_in and (settings.headphones or echo is not None)
        voice = VoiceInput(
            transcriber,
            microphone,
            hangover=settings.listen_hangover,
            max_seconds=settings.max_utterance,
            barge_in=ReplyBargeIn(session) if interrupts else None,
            echo=echo,
        )
        if barge_in and not interrupts:
            voice.mute(True)
        return voice

    @staticmethod
    def _stop_hearing(session: Session, voice: VoiceInput) -> None:
        voice.close()
        if session.sink is not None:
            session.sink.monitor(None)  # the canceller's feed, if it had one

    def _whisper(self) -> Transcriber:
        from voicecli.listen.asr import Transcriber

        with self._hearing:
            if self._transcriber is None:
                self._transcriber = Transcriber(self.settings.asr_model)
            return self._transcriber

    @staticmethod
    def _next_turn(voice: VoiceInput, timeout: float) -> Heard:
        deadline = time.monotonic() + timeout
        while True:
            # Someone still speaking at the deadline is heard out.
            left = deadline - time.monotonic()
            if left <= 0 and not (voice.hearing or voice.transcribing):
                raise VoiceCliError(f"No speech was heard within {timeout:g} s.")
            try:
                event = voice.events.get(timeout=0.05 if left <= 0 else min(left, 0.2))
            except queue.Empty:
                continue
            match event:
                case UserTurn(text=text, seconds=seconds):
                    return Heard(text, seconds)
                case InputFailed(message=message, fatal=True):
                    raise VoiceCliError(message)
                case InputFailed(message=message):
                    log.info("not understood: %s", message)
                case _:
                    pass

    def close(self) -> None:
        self.stop()
        self._opened.wait(5)
        if self._session is not None:
            self._session.close()


def _check_timeout(timeout: float) -> None:
    if not 0 < timeout <= MAX_LISTEN_SECONDS:
        raise VoiceCliError(f"timeout must be from 0 to {MAX_LISTEN_SECONDS:g} seconds.")


def _text(text: str) -> str:
    text = checked(text, "The text")
    if not text.strip():
        raise VoiceCliError("Nothing to say: the text is empty.")
    return text
