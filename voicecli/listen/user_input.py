"""What the user says or types next, in ``chat --listen``: utterances from
``VoiceInput`` and lines typed beside them, with a live state line while it waits.

On a terminal the keyboard is read key by key (``LineEditor``), so that the meter and
the typed text share one line; from a pipe, whole lines are read as they come.
"""

from __future__ import annotations

import queue
import select
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from voicecli import display
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.frames import Guess, InputFailed, SpokeOn, UserTurn, VoiceEvent
from voicecli.keys import KeyListener
from voicecli.line_editor import LineEditor
from voicecli.listen.asr import Transcriber
from voicecli.listen.echo import EchoCanceller
from voicecli.listen.mic import Microphone
from voicecli.listen.voice_input import VoiceInput
from voicecli.pipeline import TurnResult
from voicecli.session import Pending, Session

TALK_KEY = "\t"  # push-to-talk: hold Tab


@dataclass(frozen=True)
class Said:
    """One thing the user said (``spoken`` is set) or typed."""

    text: str
    spoken: UserTurn | None = None


class ReplyBargeIn:
    """Speech over a reply, with no echo to mistake for it: the reply is held at its
    onset, cut by the same flush as a key once it is a turn, let go on if it was not."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def onset(self) -> None:
        self.session.hold()

    def confirmed(self) -> None:
        # The flush restarts the output stream and tells the synthesizer, which can take
        # a while: not on the microphone's thread, which must keep reading.
        threading.Thread(
            target=self.session.interrupt, args=("voice",), name="voicecli-barge-in", daemon=True
        ).start()

    def dropped(self) -> None:
        self.session.release()


def echo_canceller(settings: Settings, session: Session) -> EchoCanceller | None:
    """On speakers, a canceller fed with what the session's player plays; None when there
    is no echo to cancel (headphones, a file) or barge-in is off (``sink.monitor(None)``
    unhooks it)."""
    sink = session.sink
    if not settings.barge_in or settings.headphones or sink is None or session.synth is None:
        return None
    if not sink.capabilities.monitor:
        return None
    try:
        echo = EchoCanceller(session.synth.sample_rate)
    except VoiceCliError as exc:
        display.error(f"{exc} Muted while a reply plays instead.")
        return None
    sink.monitor(echo.played)
    return echo


class UserInput:
    def __init__(self, settings: Settings, session: Session) -> None:
        """Raises VoiceCliError, in one line, when the microphone or the recognizer
        cannot be used (the caller goes on with typed input)."""
        self.session = session
        self.keys: KeyListener | None = session.keys
        self.editor = LineEditor()
        self.voice: VoiceInput | None = None
        self._stdin_open = not (sys.stdin is None or sys.stdin.closed)
        with display.err.status("Loading speech recognition…", spinner="dots"):
            transcriber = Transcriber(settings.asr_model)
        microphone = Microphone(settings.input_device)
        try:
            echo = echo_canceller(settings, session)
        except BaseException:
            microphone.close()
            raise
        # Without headphones or a canceller the microphone hears the reply: muted then.
        self.barge_in = settings.barge_in and (settings.headphones or echo is not None)
        push_to_talk = settings.push_to_talk
        if push_to_talk and self.keys is None:
            display.error("Push-to-talk needs a terminal to read Tab from: listening hands-free.")
            push_to_talk = False
        self.voice = VoiceInput(
            transcriber,
            microphone,
            hangover=settings.listen_hangover,
            max_seconds=settings.max_utterance,
            barge_in=ReplyBargeIn(session) if self.barge_in else None,
            push_to_talk=push_to_talk,
            echo=echo,
            guesses=settings.early_reply and session.sink.capabilities.pause,
        )
        self._back: list[VoiceEvent] = []  # taken, then given back
        self.status = display.ListenStatus(self._state)
        if not self.barge_in:
            mode = "muted while a reply plays"
        elif echo is not None:
            mode = "speaking interrupts a reply; its echo is cancelled"
        else:
            mode = "speaking interrupts a reply"
        how = "hold Tab and speak" if push_to_talk else "speak"
        display.note(f"Listening on {microphone.name} ({mode}): {how}, or type a line.")

    def _key(self, keys: str) -> None:
        voice = self.voice
        if voice is not None and voice.push_to_talk and TALK_KEY in keys:
            voice.hold()
            keys = keys.replace(TALK_KEY, "")
        self.editor.feed(keys)

    def before_turn(self) -> None:
        """The reply is about to play: unless it can be talked over, the microphone
        would only hear it."""
        if self.voice is not None and not self.barge_in:
            self.voice.mute(True)

    def after_turn(self) -> None:
        if self.voice is not None:
            self.voice.mute(False)

    def _state(self) -> tuple[str, float, str]:
        voice = self.voice
        if voice is None:
            return "typing", -100.0, self.editor.text
        if voice.push_to_talk and not voice.held and not voice.transcribing:
            state = "hold Tab"
        elif voice.hearing:
            state = "hearing you"
        else:
            state = "transcribing" if voice.transcribing else "listening"
        return state, voice.level_db, self.editor.text

    def next(self, timeout: float | None = None) -> Said | Guess | None:
        """The next thing said or typed; None when the user ends the conversation (or
        nothing came within ``timeout`` seconds). A ``Guess`` (with ``early_reply``) is
        what the user said so far, at a pause: see ``reply_early``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if self.keys is not None:
            self.keys.start(self._key)
        self.status.start()
        try:
            while True:
                said = self._poll()
                if said is not None:
                    return said
                typing_ended = self.keys is None and not self._stdin_open
                if self.editor.ended or (typing_ended and self.voice is None):
                    return None
                if deadline is not None and time.monotonic() > deadline:
                    return None
        finally:
            self.status.stop()
            if self.keys is not None:
                self.keys.stop()

    def _poll(self) -> Said | Guess | None:
        if self.editor.lines:
            return Said(self.editor.lines.pop(0))
        if self.voice is not None:
            event: VoiceEvent | None = None
            if self._back:
                event = self._back.pop(0)
            else:
                try:
                    event = self.voice.events.get(timeout=0.05)
                except queue.Empty:
                    pass
            match event:
                case Guess():
                    return event
                case UserTurn(text=text):
                    return Said(text, event)
                case InputFailed(message=message, fatal=fatal):
                    self.status.stop()
                    if fatal:
                        display.error(f"{message} Typing still works.")
                        self.voice.close()
                        self.voice = None
                    else:
                        display.error(f"{message} Please say it again.")
                    self.status.start()
                case SpokeOn() | None:
                    pass  # a guess no longer waited for, or nothing yet
        else:
            time.sleep(0.05)
        if self.keys is None and self._stdin_open:
            return self._typed_line()
        return None

    def _typed_line(self) -> Said | None:
        """A whole line from a stdin that is no terminal (a pipe), if one is waiting."""
        try:
            ready, _, _ = select.select([sys.stdin], [], [], 0)
        except (OSError, ValueError):
            self._stdin_open = False
            return None
        if not ready:
            return None
        line = sys.stdin.readline()
        if not line:
            self._stdin_open = False  # EOF: voice goes on
            return None
        return Said(line.rstrip("\n"))

    def reply_early(
        self,
        guess: Guess,
        answer: Callable[[Pending], TurnResult],
        on_confirmed: Callable[[Said], None] | None = None,
    ) -> tuple[TurnResult, Said | None]:
        """Answer ``guess`` before the turn has ended: ``answer`` runs the turn, which is
        silent and unseen while the hangover runs and plays once the turn ends with the
        same words (``on_confirmed`` first), a hangover sooner than if it began then. If
        the user spoke on or said something else, the reply is dropped unheard, and what
        came instead comes next from ``next``. Returns the turn's result and, if the
        reply was the answer, what was said."""
        pending = Pending()
        confirmed: list[Said] = []
        voice = self.voice
        assert voice is not None  # a Guess comes only from it

        def decide() -> None:
            while True:
                try:
                    event = voice.events.get(timeout=0.1)
                except queue.Empty:
                    if voice.closed:
                        pending.withdraw()
                        return
                    continue
                match event:
                    case UserTurn(text=text) if text == guess.text:
                        said = Said(text, event)
                        confirmed.append(said)
                        self.before_turn()
                        if on_confirmed is not None:
                            on_confirmed(said)
                        pending.confirm()
                    case SpokeOn():
                        pending.withdraw()
                    case _:  # the turn was something else: it comes next from ``next``
                        pending.withdraw()
                        self._back.append(event)
                return

        decider = threading.Thread(target=decide, name="voicecli-early-reply", daemon=True)
        decider.start()
        result = answer(pending)
        decider.join()
        return result, confirmed[0] if confirmed else None

    def close(self) -> None:
        self.status.stop()
        if self.session.sink is not None:
            self.session.sink.monitor(None)
        if self.voice is not None:
            self.voice.close()
