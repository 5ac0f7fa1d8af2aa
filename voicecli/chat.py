"""The chat loop: prompt, stream the reply into speech, remember what was heard."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from voicecli import display
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.frames import MAX_SPEED, MIN_SPEED
from voicecli.llm.contract import LLM
from voicecli.llm.open import open_llm
from voicecli.pipeline import TurnResult
from voicecli.session import Pending, Session
from voicecli.timeline import PLAYED

if TYPE_CHECKING:
    from voicecli.listen.user_input import Said, UserInput

log = logging.getLogger(__name__)

CUT_OFF = "[interrupted: the user heard only the text above]"
PROMPT = "you> "
HISTORY_LENGTH = 1000

COMMANDS = {
    "/voice NAME": "speak with another voice or blend (af_heart+am_adam)",
    "/speed X": f"speaking rate, {MIN_SPEED} to {MAX_SPEED}",
    "/model NAME": "ask another model on the same server",
    "/system TEXT": "replace the system prompt (keeps the conversation)",
    "/clear": "forget the conversation",
    "/help": "this list",
    "/quit": "leave (Ctrl-D does too)",
}


def prepare_llm(llm: LLM) -> None:
    """Wait for ``llm`` to answer, and say on the user's first line what answers."""
    with display.err.status("Getting the LLM ready…", spinner="dots"):
        llm.ready()
    display.note(f"LLM: {llm.describe()}")


def remembered(result: TurnResult) -> str:
    """The assistant's turn as the history keeps it: only what the user heard."""
    if not result.interrupted:
        return result.text
    heard = result.heard.strip()
    return f"{heard} {CUT_OFF}" if heard else CUT_OFF


class Conversation:
    """The messages sent to the LLM, and the /commands that change the chat."""

    def __init__(self, settings: Settings, session: Session, llm: LLM) -> None:
        self.session = session
        self.llm = llm
        self.system = settings.system_prompt
        self.messages: list[dict[str, str]] = [{"role": "system", "content": self.system}]
        self.quit = False

    def command(self, line: str) -> None:
        """Run one /command; a mistake raises VoiceCliError with what to type instead."""
        name, _, arg = line.strip().partition(" ")
        arg = arg.strip()
        handler: Callable[[str], None] | None = {
            "/voice": self._voice,
            "/speed": self._speed,
            "/model": self._set_model,
            "/system": self._system,
            "/clear": self._clear,
            "/help": self._help,
            "/quit": self._quit,
            "/exit": self._quit,
        }.get(name.lower())
        if handler is None:
            raise VoiceCliError(f"Unknown command {name}. /help lists the commands.")
        handler(arg)

    def _voice(self, arg: str) -> None:
        if not arg:
            raise VoiceCliError(
                "Which voice? For example: /voice am_adam (`voicecli voices` lists them)."
            )
        self.session.synth.set_voice(arg)  # checks the name and loads the pack now
        display.note(f"voice: {arg}")

    def _speed(self, arg: str) -> None:
        try:
            speed = float(arg)
        except ValueError:
            raise VoiceCliError(
                f"Speed is a number from {MIN_SPEED} to {MAX_SPEED}, e.g. /speed 1.2"
            ) from None
        self.session.synth.set_speed(speed)
        display.note(f"speed: {speed:g}")

    def _set_model(self, arg: str) -> None:
        if not arg:
            raise VoiceCliError(f"Which model? Now: {self.llm.model}. Example: /model gpt-4o")
        self.llm.model = arg
        display.note(f"model: {arg}")

    def _system(self, arg: str) -> None:
        if not arg:
            display.note(f"system prompt: {self.system}")
            return
        self.system = arg
        self.messages[0] = {"role": "system", "content": arg}
        display.note("system prompt replaced")

    def _clear(self, arg: str) -> None:
        self.messages = [{"role": "system", "content": self.system}]
        display.note("conversation cleared")

    def _help(self, arg: str) -> None:
        width = max(len(c) for c in COMMANDS)
        for usage, what in COMMANDS.items():
            display.note(f"{usage.ljust(width)}  {what}")
        display.note(f"While it speaks: {display.KEYS_HINT}.")

    def _quit(self, arg: str) -> None:
        self.quit = True

    def ask(
        self,
        question: str,
        pending: Pending | None = None,
        *,
        view: display.TurnView | None = None,
        buffered: bool | None = None,
    ) -> TurnResult:
        """One turn: send the question, speak the answer, remember what was heard.
        ``pending``: a reply prepared early, forgotten unless it is confirmed. ``view``
        shows it (the terminal's by default); ``buffered`` as in ``Session.speak``."""
        self.messages.append({"role": "user", "content": question})
        history = list(self.messages)
        llm = self.llm
        result = self.session.speak(
            lambda cancel, tl: llm.stream(history, cancel, tl),
            label="chat",
            fast_first=self.session.settings.fast_first,
            view=view if view is not None else display.turn_view(reply=True),
            pending=pending,
            buffered=buffered,
        )
        if result.error is not None or (pending is not None and not pending.confirmed):
            self.messages.pop()  # the question goes unanswered: the user may ask again
        else:
            self.messages.append({"role": "assistant", "content": remembered(result)})
        turn = self.session.last_turn
        self.quit = self.quit or (turn is not None and turn.quit)
        return result


def run_chat(settings: Settings, *, once: str | None = None, listen: bool = False) -> None:
    if once is not None and not once.strip():
        raise VoiceCliError("Nothing to ask: the question is empty.")
    with ExitStack() as stack:
        llm = open_llm(settings)
        stack.callback(llm.close)
        # A process's first forward passes are slow. Interactive chat warms speech up
        # before its prompt; --once only while a model loads in this process anyway.
        # (The engine warms itself up when idle.)
        warm = once is None or llm.loads_in_process
        session = stack.enter_context(Session(settings, warm_up=warm))
        prepare_llm(llm)
        chat = Conversation(settings, session, llm)
        if once is not None:
            result = chat.ask(once)
            if result.error is not None:
                raise result.error
            return
        if listen:
            user = _user_input(settings, session)
            if user is not None:
                stack.callback(user.close)
                _listen_loop(chat, user)
                return
        stack.enter_context(_LineEditing())
        while not chat.quit:
            display.your_turn()
            try:
                line = input(PROMPT)
            except EOFError:
                display.note("Bye.")
                return
            _answer(chat, line)


def _user_input(settings: Settings, session: Session) -> UserInput | None:
    """The microphone with typing beside it; None, said in one line, if the microphone
    or the recognizer cannot be used: the chat goes on typed."""
    from voicecli.listen.user_input import UserInput

    try:
        return UserInput(settings, session)
    except VoiceCliError as exc:
        display.error(f"{exc} Chat goes on with typed input.")
        return None


def _listen_loop(chat: Conversation, user: UserInput) -> None:
    from voicecli.frames import Guess

    while not chat.quit:
        next_input = user.next()
        match next_input:
            case None:
                display.note("Bye.")
                return
            case Guess(text=guess):
                try:
                    result, confirmed = user.reply_early(
                        next_input,
                        lambda pending, guess=guess: chat.ask(guess, pending),
                        on_confirmed=_show_said,
                    )
                finally:
                    user.after_turn()
                if confirmed is None:
                    continue  # dropped unheard: the user went on, and what they said is next
                said = confirmed
                if result.error is not None:
                    display.error(str(result.error))
            case _:
                said = next_input
                _show_said(said)
                user.before_turn()
                try:
                    result = _answer(chat, said.text)
                finally:
                    user.after_turn()
        played = result.timeline.first(PLAYED) if result is not None else None
        spoken = said.spoken
        if spoken is not None and played is not None and chat.session.settings.timings:
            display.note(
                f"voice to voice: {(played - spoken.ended) * 1000:.0f} ms from the end of your "
                f"speech to the reply's first sound (end of turn "
                f"{(spoken.turned - spoken.ended) * 1000:.0f} ms, transcript "
                f"{(spoken.transcribed - spoken.turned) * 1000:.0f} ms more, then the reply "
                f"{(played - spoken.transcribed) * 1000:.0f} ms)"
            )


def _show_said(said: Said) -> None:
    if said.spoken is not None:
        display.spoken(said.text, said.spoken.capped)
    else:
        display.typed(said.text)  # the live line that showed it is gone


def _answer(chat: Conversation, line: str) -> TurnResult | None:
    """One line from the user: a /command, or a question to answer."""
    if not line.strip():
        return None
    if line.lstrip().startswith("/"):
        try:
            chat.command(line)
        except VoiceCliError as exc:
            display.error(str(exc))
        return None
    result = chat.ask(line)
    if result.error is not None:
        display.error(str(result.error))
    return result


class _LineEditing:
    """readline for input(): arrow keys, editing and a history kept between runs."""

    def __init__(self) -> None:
        state = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
        self.path = state / "voicecli" / "history"
        self.readline = None

    def __enter__(self) -> _LineEditing:
        try:
            import readline
        except ImportError:  # not on every platform: input() still works, without history
            return self
        self.readline = readline
        readline.set_history_length(HISTORY_LENGTH)
        try:
            readline.read_history_file(self.path)
        except (FileNotFoundError, PermissionError):
            pass
        except OSError as exc:
            log.debug("chat history %s unreadable: %s", self.path, exc)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.readline is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.readline.write_history_file(self.path)
        except OSError as exc:
            log.debug("chat history %s not saved: %s", self.path, exc)
