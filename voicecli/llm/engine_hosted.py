"""The resident engine's embedded model: the engine runs it (one for every terminal of
this user) and says where it answers; each reply asks again, since the engine may have
idled out or died since the last one, and talks to it on its Unix socket."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from voicecli.cancel import CancelToken
from voicecli.config import Settings
from voicecli.engine.handle import EngineHandle
from voicecli.llm.contract import Messages
from voicecli.llm.embedded import LLMEndpoint, embedded_chat
from voicecli.llm.openai_chat import OpenAIChat
from voicecli.timeline import Timeline


class EngineLLM:
    where = "the embedded LLM"
    loads_in_process = False

    def __init__(self, settings: Settings, *, max_retries: int = 1) -> None:
        self.settings = settings
        self.engine = EngineHandle(settings)
        self.model = ""
        self._max_retries = max_retries
        self._chat: OpenAIChat | None = None
        self._socket: str | None = None
        self._lock = threading.Lock()

    def _current(self) -> OpenAIChat:
        """The chat client of the engine's model as it is now: started if need be."""
        data = self.engine.llm_endpoint()
        endpoint = LLMEndpoint(data["socket"], data["api_key"], data["model"], data["model_path"])
        with self._lock:
            if self._chat is None or endpoint.socket != self._socket:
                s = self.settings
                chat = embedded_chat(
                    endpoint,
                    temperature=s.temperature,
                    max_tokens=s.max_tokens,
                    timeout=s.llm_timeout,
                    max_retries=self._max_retries,
                )
                chat.warm_up(s.system_prompt)
                if self._chat is not None:
                    self._chat.close()
                self._chat, self._socket = chat, endpoint.socket
                self.model = self.model or chat.model
            self._chat.model = self.model
            return self._chat

    def ready(self) -> None:
        self._current()

    def stream(self, messages: Messages, cancel: CancelToken, timeline: Timeline) -> Iterator[str]:
        return self._current().stream(messages, cancel, timeline)

    def describe(self) -> str:
        return "embedded, in the voicecli engine"

    def close(self) -> None:
        if self._chat is not None:
            self._chat.close()
