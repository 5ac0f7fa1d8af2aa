"""An OpenAI-compatible chat server, streamed with the ``openai`` package: OpenAI itself,
a local server (llama.cpp, Ollama, vLLM...), or the embedded model on its Unix socket."""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.llm.contract import Messages
from voicecli.text import why_bad
from voicecli.timeline import FIRST_TOKEN, REQUEST_SENT, Timeline

log = logging.getLogger(__name__)


class OpenAIChat:
    """One OpenAI-compatible chat endpoint. Each reply streams on a client of its own,
    taken from a pool (``openai.OpenAI`` keeps its connections alive), so that replies
    may stream side by side and a reply that stalls is aborted alone."""

    loads_in_process = False

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str | None,
        model: str,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float = 20.0,
        max_retries: int = 1,
        socket_path: str | None = None,
        where: str | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.where = where or base_url or "the OpenAI API"
        self._named = where is not None
        self.temperature = temperature
        self.max_tokens = max_tokens
        # ``timeout`` bounds each wait, end to end: from the request to the first piece of
        # the reply (connecting, headers and the client's own retries included), and
        # between pieces. httpx's timeouts are per read, so a server that drips a byte at
        # a time would never trip them: a watchdog (``_Deadline``) holds the line.
        self.timeout = timeout
        self._api_key = api_key or "not-needed"
        self._max_retries = max_retries
        self._socket_path = socket_path  # the embedded model's Unix socket
        self._idle: list[Any] = []  # clients no reply is streaming on
        self._lock = threading.Lock()
        self._closed = False

    def _new_client(self) -> Any:
        from openai import OpenAI

        http_client = None
        if self._socket_path is not None:
            import httpx

            http_client = httpx.Client(transport=httpx.HTTPTransport(uds=self._socket_path))
        return OpenAI(
            base_url=self.base_url,
            api_key=self._api_key,
            timeout=self.timeout,
            max_retries=self._max_retries,
            http_client=http_client,
        )

    def _take(self) -> Any:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._new_client()

    def _give_back(self, client: Any) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(client)
                return
        client.close()

    def ready(self) -> None:
        """Nothing to wait for: a server that is not there says so on the first reply."""

    def warm_up(self, system_prompt: str) -> None:
        """Ask for one token of a reply to ``system_prompt`` alone, for a server on this
        machine: a first request pays for setting up the client, the connection and the
        server's own caches, and a later conversation with the same system prompt
        reuses its tokens. A failure costs only the time: the conversation's own
        request reports errors."""
        import openai

        client = self._take()
        try:
            for _ in client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": system_prompt}],
                max_tokens=1,
                stream=True,
            ):
                pass
        except openai.OpenAIError as exc:
            log.debug("warming up %s failed: %s", self.where, exc)
        self._give_back(client)

    def describe(self) -> str:
        """ "gpt-4o-mini at api.openai.com", or where it was named: "ollama at
        127.0.0.1:11434, llama3.2:3b"."""
        if self._named:
            return f"{self.where}, {self.model}"
        return f"{self.model} at {self.base_url or 'api.openai.com'}"

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for client in idle:
            client.close()

    def stream(self, messages: Messages, cancel: CancelToken, timeline: Timeline) -> Iterator[str]:
        extra: dict[str, Any] = {}
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        if self.max_tokens is not None:
            extra["max_tokens"] = self.max_tokens
        timeline.mark(REQUEST_SENT)
        reply = _Reply(self._take())
        deadline = _Deadline(self.timeout, reply.abort)
        try:
            yield from self._pieces(reply, messages, extra, cancel, timeline, deadline)
        finally:
            deadline.cancel()
            if reply.aborted:
                reply.client.close()  # broken by the abort; the pool makes a new one
            else:
                self._give_back(reply.client)

    def _pieces(
        self,
        reply: _Reply,
        messages: Messages,
        extra: dict[str, Any],
        cancel: CancelToken,
        timeline: Timeline,
        deadline: _Deadline,
    ) -> Iterator[str]:
        import openai

        where = self.where
        try:
            response = reply.client.chat.completions.create(
                model=self.model, messages=messages, stream=True, **extra
            )
        except Exception as exc:  # noqa: BLE001 - a closed client raises RuntimeError
            if deadline.expired:
                raise VoiceCliError(self._no_answer()) from None
            if not isinstance(exc, openai.APIError):
                raise
            raise self._refused(exc) from None
        reply.response = response
        # Closing the response aborts the HTTP read this thread may be blocked in.
        cancel.on_cancel(response.close)
        first = True
        finished = False  # the server said the reply is complete (a finish reason)
        try:
            for chunk in response:
                deadline.reset()
                if cancel.cancelled:
                    return
                if not chunk.choices:
                    continue
                finished = finished or chunk.choices[0].finish_reason is not None
                piece = chunk.choices[0].delta.content
                if not piece:
                    continue
                why = why_bad(piece)
                if why is not None:
                    raise VoiceCliError(
                        f"The LLM stream from {where} sent text that is {why}; what had "
                        "arrived before it was spoken."
                    )
                if first:
                    timeline.mark(FIRST_TOKEN)
                    first = False
                yield piece
        except VoiceCliError:
            raise
        except Exception as exc:  # noqa: BLE001 - httpx errors after close() or a dropped link
            if cancel.cancelled:
                return
            if deadline.expired or isinstance(exc, openai.APITimeoutError):
                raise VoiceCliError(
                    f"The LLM server at {where} stopped sending its reply for "
                    f"{self.timeout:g} s; the reply was cut off there."
                ) from None
            raise self._broken(exc) from None
        finally:
            reply.response = None
            response.close()
        if not finished and not cancel.cancelled:
            raise VoiceCliError(
                f"The reply from {where} was cut off: the stream ended before the server "
                "said it was complete. What had arrived was spoken."
            )

    def _no_answer(self) -> str:
        return (
            f"The LLM server at {self.where} did not answer within {self.timeout:g} s. It "
            "may be overloaded or stuck; raise llm_timeout if it is just slow."
        )

    def _refused(self, exc: Exception) -> VoiceCliError:
        """The request failed before any of the reply came."""
        import openai

        where = self.where
        if isinstance(exc, openai.AuthenticationError):
            return VoiceCliError(
                f"{where} refused the API key (HTTP 401). Set OPENAI_API_KEY or api_key "
                "in the config file, or use --llm local for the embedded model."
            )
        if isinstance(exc, openai.RateLimitError):
            return VoiceCliError(
                f"{where} is rate limiting this key (HTTP 429). Wait and retry, or check "
                "the account's quota."
            )
        if isinstance(exc, openai.NotFoundError):
            return VoiceCliError(
                f"{where} does not know model {self.model!r} or the chat endpoint (HTTP 404). "
                "Check --model and --base-url."
            )
        if isinstance(exc, openai.APITimeoutError):
            return VoiceCliError(self._no_answer())
        if isinstance(exc, openai.APIConnectionError):
            return VoiceCliError(
                f"Cannot reach the LLM server at {where} ({type(exc).__name__}). "
                "Check --base-url and that the server is running."
            )
        if isinstance(exc, openai.APIStatusError):
            return VoiceCliError(f"{where} answered HTTP {exc.status_code}: {_short(exc.message)}")
        return VoiceCliError(f"The LLM request to {where} failed: {_short(str(exc))}")

    def _broken(self, exc: Exception) -> VoiceCliError:
        """The reply broke off after it had started."""
        import openai

        where = self.where
        if isinstance(exc, openai.APIConnectionError):
            return VoiceCliError(
                f"The connection to the LLM server at {where} broke off mid-reply; what had "
                "arrived was spoken."
            )
        if isinstance(exc, openai.APIError):
            return VoiceCliError(f"The LLM stream from {where} failed: {_short(str(exc))}")
        if isinstance(exc, UnicodeDecodeError | json.JSONDecodeError):
            return VoiceCliError(
                f"The LLM server at {where} sent something that is not an OpenAI chat stream "
                "(not JSON events); what had arrived before it was spoken. Is --base-url the "
                "server's OpenAI-compatible API?"
            )
        return VoiceCliError(f"The LLM stream from {where} broke off ({type(exc).__name__}).")


class _Reply:
    """One reply's client and response, for its deadline to abort."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.response: Any = None
        self.aborted = False

    def abort(self) -> None:
        """The deadline passed: closing the response and the client breaks any read
        they are blocked in."""
        self.aborted = True
        response = self.response
        if response is not None:
            # Closing alone waits for the blocked read to return (the next byte of a
            # server that drips); shutting the socket down wakes it now.
            stream = response.response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            response.close()
        self.client.close()


class _Deadline:
    """Calls ``expire`` once ``seconds`` pass without a ``reset``."""

    def __init__(self, seconds: float, expire: Callable[[], None]) -> None:
        self.seconds = seconds
        self._expire = expire
        self.expired = False
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self.reset()

    def reset(self) -> None:
        with self._lock:
            if self.expired:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(self.seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self.expired or self._timer is None:
                return
            self.expired = True
        self._expire()

    def cancel(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None


def _short(text: str | None, limit: int = 200) -> str:
    line = (text or "").strip().splitlines()[0] if text and text.strip() else "no details"
    return line[:limit]
