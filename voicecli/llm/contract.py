"""What every LLM is to voicecli: something that streams a reply to messages as text
pieces, stops when the turn's cancel token fires, and marks the turn's timeline
(REQUEST_SENT, FIRST_TOKEN). ``voicecli.llm.open`` picks the one the settings ask for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from voicecli.cancel import CancelToken
from voicecli.timeline import Timeline

Messages = list[dict[str, str]]


class LLM(Protocol):
    model: str  # the model asked for; /model changes it
    where: str  # in messages: "the embedded LLM", "http://127.0.0.1:11434/v1"...
    # ``ready`` waits for a model that loads in this process (and its CPU): a caller may
    # load other things meanwhile.
    loads_in_process: bool

    def ready(self) -> None:
        """Wait until a reply can be asked for (a model loaded, a server checked, the
        first request's set-up paid); VoiceCliError if it never can."""
        ...

    def stream(self, messages: Messages, cancel: CancelToken, timeline: Timeline) -> Iterator[str]:
        """The reply, piece by piece; VoiceCliError, in one line, for what went wrong.
        Safe to call from several threads at once (the tabs of ``voicecli web``)."""
        ...

    def describe(self) -> str:
        """What answers, for the user's first line: "gpt-4o-mini at api.openai.com"."""
        ...

    def close(self) -> None: ...
