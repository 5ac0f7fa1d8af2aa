"""The chat loop: prompt, stream the reply into speech, remember what was heard."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from voicecli import display
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.frames import MAX_SPEED, MIN_SPEED
from voicecli.llm.embedded import SOCKET_BASE_URL
from voicecli.pipeline import TurnResult
from voicecli.session import Pending, Session
from voicecli.sources import ChatClient
from voicecli.timeline import PLAYED

if TYPE_CHECKING:
    from voicecli.listen.user_input import Said, UserInput
    from voicecli.llm.embedded import LocalLLMServer

log = logging.getLogger(__name__)

CUT_OFF = "[interrupted: the user heard only the text above]"
PROMPT = "you> "
HISTORY_LENGTH = 1000
# SmolLM2-135M drifts at llama.cpp's default 0.8 ("Le Jura is the capital of France"); at 0
# it repeats itself. 0.2 answered 6-7 of 10 simple questions right (docs/embedded-llm.md).
EMBEDDED_TEMPERATURE = 0.2

COMMANDS = {
    "/voice NAME": "speak with another voice or blend (af_heart+am_adam)",
    "/speed X": f"speaking rate, {MIN_SPEED} to {MAX_SPEED}",
    "/model NAME": "ask another model on the same server",
    "/system TEXT": "replace the system prompt (keeps the conversation)",
    "/clear": "forget the conversation",
    "/help": "this list",
    "/quit": "leave (Ctrl-D does too)",
}


def uses_embedded_llm(settings: Settings) -> bool:
    """Whether the embedded model answers: asked for, or no server or key configured."""
    if settings.llm == "local" or (
        settings.llm == "auto" and not settings.base_url and not settings.api_key
    ):
        return True
    if not settings.base_url and not settings.api_key:
        raise VoiceCliError(
            "No LLM configured: set OPENAI_API_KEY or --base-url, "
            "or use --llm local for the embedded model."
        )
    return False


def launch_llm(settings: Settings, stack: ExitStack) -> LocalLLMServer | None:
    """Check the LLM settings, and launch the embedded model in this process's care when
    no server or key is configured and there is no engine to share one: llama.cpp then
    loads its model while voicecli loads speech."""
    if not uses_embedded_llm(settings) or settings.engine:
        return None
    from voicecli.llm.embedded import LocalLLMServer

    server = LocalLLMServer(
        settings.llm_model_path, n_threads=settings.llm_threads, nice=settings.llm_nice
    )
    stack.callback(server.stop)
    server.launch()
    return server


def embedded_client(settings: Settings, endpoint: dict[str, Any]) -> ChatClient:
    """A client of the embedded model at ``endpoint`` (socket, api_key, model), warmed up."""
    client = ChatClient(
        base_url=SOCKET_BASE_URL,
        api_key=endpoint["api_key"],
        model=endpoint["model"],
        temperature=EMBEDDED_TEMPERATURE if settings.temperature is None else settings.temperature,
        max_tokens=settings.max_tokens,
        timeout=settings.llm_timeout,
        socket=endpoint["socket"],
    )
    client.warm_up(settings.system_prompt)
    return client


class EngineLLM:
    """The resident engine's embedded model, asked for again before every turn: the
    engine may have idled out, or died, since the last one."""

    def __init__(self, settings: Settings) -> None:
        from voicecli.engine.handle import EngineHandle

        self.settings = settings
        self.engine = EngineHandle(settings)
        self._socket: str | None = None
        self._client: ChatClient | None = None

    def client(self) -> ChatClient:
        endpoint = self.engine.llm_endpoint()
        if self._client is None or endpoint["socket"] != self._socket:
            self._client = embedded_client(self.settings, endpoint)
            self._socket = endpoint["socket"]
        return self._client


def connect_llm(settings: Settings, local: LocalLLMServer | None) -> ChatClient | EngineLLM:
    """The configured server, the engine's embedded model, or the embedded model launched
    by ``launch_llm`` once it answers; warmed up."""
    if not uses_embedded_llm(settings):
        display.note(f"LLM: {settings.model} at {settings.base_url or 'api.openai.com'}")
        return ChatClient(
            base_url=settings.base_url,
            api_key=settings.api_key,
            model=settings.model,
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            timeout=settings.llm_timeout,
        )
    with display.err.status("Starting the embedded LLM…", spinner="dots"):
        if local is None:
            llm = EngineLLM(settings)
            llm.client()
            display.note("LLM: embedded, in the voicecli engine")
            return llm
        local.wait_ready()
        endpoint = local.endpoint
        client = embedded_client(
            settings,
            {"socket": endpoint.socket, "api_key": endpoint.api_key, "model": endpoint.model},
        )
    display.note(f"LLM: embedded {local.model_path.name}")
    return client


def remembered(result: TurnResult) -> str:
    """The assistant's turn as the history keeps it: only what the user heard."""
    if not result.interrupted:
        return result.text
    heard = result.heard.strip()
    return f"{heard} {CUT_OFF}" if heard else CUT_OFF


class Conversation:
    """The messages sent to the LLM, and the /commands that change the chat."""

    def __init__(self, settings: Settings, session: Session, llm: ChatClient | EngineLLM) -> None:
        self.session = session
        self._llm = llm
        self._model: str | None = None  # set by /model
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

    @property
    def llm(self) -> ChatClient:
        client = self._llm if isinstance(self._llm, ChatClient) else self._llm.client()
        if self._model is not None:
            client.model = self._model
        return client

    def _set_model(self, arg: str) -> None:
        if not arg:
            raise VoiceCliError(f"Which model? Now: {self.llm.model}. Example: /model gpt-4o")
        self._model = arg
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
        local = launch_llm(settings, stack)
        # A process's first forward passes are slow. Interactive chat warms speech up
        # before its prompt; --once only while the embedded LLM starts anyway. (The
        # engine warms itself up when idle.)
        session = stack.enter_context(Session(settings, warm_up=once is None or local is not None))
        llm = connect_llm(settings, local)
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
            display.listening()
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
    from voicecli.listen.voice_input import Guess

    while not chat.quit:
        said = user.next()
        if said is None:
            display.note("Bye.")
            return
        if isinstance(said, Guess):
            try:
                result, heard = user.reply_early(
                    said,
                    lambda pending, guess=said.text: chat.ask(guess, pending),
                    on_heard=_show_said,
                )
            finally:
                user.after_turn()
            if heard is None:
                continue  # dropped unheard: the user went on, and what they said is next
            said = heard
            if result.error is not None:
                display.error(str(result.error))
        else:
            _show_said(said)
            user.before_turn()
            try:
                result = _answer(chat, said.text)
            finally:
                user.after_turn()
        played = result.timeline.first(PLAYED) if result is not None else None
        if said.heard is not None and played is not None and chat.session.settings.timings:
            heard = said.heard
            display.note(
                f"voice to voice: {(played - heard.ended) * 1000:.0f} ms from the end of your "
                f"speech to the reply's first sound (end of turn "
                f"{(heard.turned - heard.ended) * 1000:.0f} ms, transcript "
                f"{(heard.transcribed - heard.turned) * 1000:.0f} ms more, then the reply "
                f"{(played - heard.transcribed) * 1000:.0f} ms)"
            )


def _show_said(said: Said) -> None:
    if said.heard is not None:
        display.heard(said.text, said.heard.capped)
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
