"""The chat loop: prompt, stream the reply into speech, remember what was heard."""

from __future__ import annotations

import sys
from contextlib import ExitStack

from voicecli import display
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.pipeline import TurnResult
from voicecli.session import Session
from voicecli.sources import ChatClient

CUT_OFF = "[interrupted: the user heard only the text above]"


def connect_llm(settings: Settings, stack: ExitStack) -> ChatClient:
    """The configured server, or the embedded model when none is configured."""
    use_local = settings.llm == "local" or (
        settings.llm == "auto" and not settings.base_url and not settings.api_key)
    if not use_local:
        if not settings.base_url and not settings.api_key:
            raise VoiceCliError("No LLM configured: set OPENAI_API_KEY or --base-url, "
                                "or use --llm local for the embedded model.")
        display.note(f"LLM: {settings.model} at {settings.base_url or 'api.openai.com'}")
        return ChatClient(base_url=settings.base_url, api_key=settings.api_key,
                          model=settings.model, temperature=settings.temperature,
                          max_tokens=settings.max_tokens)
    from voicecli.llm_local import LocalLLMServer

    server = LocalLLMServer(settings.llm_model_path)
    stack.callback(server.stop)
    with display.err.status("Starting the embedded LLM…", spinner="dots"):
        server.start()
    display.note(f"LLM: embedded {server.model_path.name} at {server.base_url}")
    return ChatClient(base_url=server.base_url, api_key="local", model=server.model_name,
                      temperature=settings.temperature, max_tokens=settings.max_tokens)


def remembered(result: TurnResult) -> str:
    """The assistant's turn as the history keeps it: only what the user heard."""
    if not result.interrupted:
        return result.text
    heard = result.heard.strip()
    return f"{heard} {CUT_OFF}" if heard else CUT_OFF


def run_chat(settings: Settings, *, once: str | None = None) -> None:
    with ExitStack() as stack:
        llm = connect_llm(settings, stack)
        session = stack.enter_context(Session(settings))
        messages = [{"role": "system", "content": settings.system_prompt}]
        interactive = once is None
        if interactive:
            _enable_line_editing()
            display.note("Type a message and press Enter. While it speaks, any key "
                         "interrupts. Ctrl-D or Ctrl-C quits.")
        while True:
            if interactive:
                try:
                    question = input("you> ")
                except EOFError:
                    display.note("Bye.")
                    return
            else:
                question = once
            if not question.strip():
                if interactive:
                    continue
                raise VoiceCliError("Nothing to ask: the question is empty.")
            messages.append({"role": "user", "content": question})
            if interactive:
                sys.stdout.write("assistant> ")
                sys.stdout.flush()
            result = session.speak(
                lambda cancel, tl, history=list(messages): llm.stream(history, cancel, tl),
                label="chat", fast_first=settings.fast_first, on_text=display.stream_text)
            sys.stdout.write("\n")
            if result.interrupted:
                display.note("(interrupted)")
            if result.error is not None:
                if not interactive:
                    raise result.error
                display.error(str(result.error))
                messages.pop()
            else:
                messages.append({"role": "assistant", "content": remembered(result)})
            if not interactive:
                return


def _enable_line_editing() -> None:
    try:
        import readline  # noqa: F401 - importing it gives input() history and arrow keys
    except ImportError:
        pass
