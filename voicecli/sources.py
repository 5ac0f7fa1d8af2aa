"""Text sources: an OpenAI-compatible streaming chat, stdin as it arrives, arguments.

Each source is an iterator of text pieces. It marks REQUEST_SENT and
FIRST_TOKEN on the turn timeline and stops when the cancel token fires.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.timeline import FIRST_TOKEN, REQUEST_SENT, Timeline

log = logging.getLogger(__name__)

READ_SIZE = 4096


def text_source(parts: list[str], timeline: Timeline) -> Iterator[str]:
    timeline.mark(REQUEST_SENT)
    text = " ".join(parts)
    if text:
        timeline.mark(FIRST_TOKEN)
        yield text


def stdin_source(fd: int, cancel: CancelToken, timeline: Timeline) -> Iterator[str]:
    """Text from ``fd`` as it arrives (no waiting for EOF or for a full buffer).

    Invalid UTF-8 stops the source with an error naming the byte offset; the
    text before it is still spoken.
    """
    pending = b""  # the start of a multi-byte character split across reads
    offset = 0  # bytes of input before ``pending``
    first = True
    timeline.mark(REQUEST_SENT)
    while not cancel.cancelled:
        data = os.read(fd, READ_SIZE)
        final = not data
        buf = pending + data
        try:
            text, used = codecs.utf_8_decode(buf, "strict", final)
        except UnicodeDecodeError as exc:
            valid = buf[: exc.start].decode("utf-8")
            if valid:
                yield valid
            raise VoiceCliError(
                f"Standard input is not valid UTF-8 (bad byte at offset {offset + exc.start}). "
                "Convert it first, for example: iconv -f latin1 -t utf-8 FILE | voicecli say"
            ) from None
        pending = buf[used:]
        offset += used
        if text:
            if first:
                timeline.mark(FIRST_TOKEN)
                first = False
            yield text
        if final:
            return


class ChatClient:
    """One OpenAI-compatible chat endpoint, streamed with the ``openai`` package."""

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
        socket: str | None = None,
    ) -> None:
        from openai import OpenAI

        self.model = model
        self.base_url = base_url
        self.where = "the embedded LLM" if socket is not None else base_url or "the OpenAI API"
        self.temperature = temperature
        self.max_tokens = max_tokens
        # ``timeout`` bounds each wait, end to end: from the request to the first piece of
        # the reply (connecting, headers and the client's own retries included), and
        # between pieces. httpx's timeouts are per read, so a server that drips a byte at
        # a time would never trip them: a watchdog (``_Deadline``) holds the line.
        self.timeout = timeout

        def make_client() -> OpenAI:
            http_client = None
            if socket is not None:  # the embedded model, on its private Unix socket
                import httpx

                http_client = httpx.Client(transport=httpx.HTTPTransport(uds=socket))
            return OpenAI(
                base_url=base_url,
                api_key=api_key or "not-needed",
                timeout=timeout,
                max_retries=max_retries,
                http_client=http_client,
            )

        self._make_client = make_client
        self.client = make_client()
        self._response: Any = None  # the reply being read, for the deadline to close

    def warm_up(self, system_prompt: str) -> None:
        """Ask for one token of a reply to ``system_prompt`` alone, for a server on this
        machine: a first request pays for setting up the client, the connection and
        llama.cpp (200 ms more to the first token of the embedded LLM), and a later
        conversation with the same system prompt reuses its tokens. A failure costs only
        the time: the conversation's own request reports errors."""
        import openai

        try:
            for _ in self.client.chat.completions.create(
                model=self.model,
                messages=[{"role": "system", "content": system_prompt}],
                max_tokens=1,
                stream=True,
            ):
                pass
        except openai.OpenAIError as exc:
            log.debug("warming up %s failed: %s", self.where, exc)

    def stream(
        self, messages: list[dict[str, str]], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[str]:

        extra: dict[str, Any] = {}
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        if self.max_tokens is not None:
            extra["max_tokens"] = self.max_tokens
        where = self.where
        timeline.mark(REQUEST_SENT)
        deadline = _Deadline(self.timeout, self._abort)
        try:
            yield from self._pieces(messages, extra, where, cancel, timeline, deadline)
        finally:
            deadline.cancel()

    def _abort(self) -> None:
        """The deadline passed: closing the reply and the client breaks any read they
        are blocked in; the next request gets a new client."""
        response, self._response = self._response, None
        if response is not None:
            # Closing alone waits for the blocked read to return (the next byte of a
            # server that drips); shutting the socket down wakes it now.
            stream = response.response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            response.close()
        client, self.client = self.client, self._make_client()
        client.close()

    def _pieces(
        self,
        messages: list[dict[str, str]],
        extra: dict[str, Any],
        where: str,
        cancel: CancelToken,
        timeline: Timeline,
        deadline: _Deadline,
    ) -> Iterator[str]:
        import openai

        try:
            response = self.client.chat.completions.create(
                model=self.model, messages=messages, stream=True, **extra
            )
        except Exception as exc:  # noqa: BLE001 - a closed client raises RuntimeError
            if deadline.expired:
                raise VoiceCliError(self._no_answer(where)) from None
            if not isinstance(exc, openai.APIError):
                raise
            raise self._refused(exc, where) from None
        self._response = response
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
                if first:
                    timeline.mark(FIRST_TOKEN)
                    first = False
                yield piece
        except Exception as exc:  # noqa: BLE001 - httpx errors after close() or a dropped link
            if cancel.cancelled:
                return
            if deadline.expired or isinstance(exc, openai.APITimeoutError):
                raise VoiceCliError(
                    f"The LLM server at {where} stopped sending its reply for "
                    f"{self.timeout:g} s; the reply was cut off there."
                ) from None
            raise self._broken(exc, where) from None
        finally:
            self._response = None
            response.close()
        if not finished and not cancel.cancelled:
            raise VoiceCliError(
                f"The reply from {where} was cut off: the stream ended before the server "
                "said it was complete. What had arrived was spoken."
            )

    def _no_answer(self, where: str) -> str:
        return (
            f"The LLM server at {where} did not answer within {self.timeout:g} s. It may be "
            "overloaded or stuck; raise llm_timeout if it is just slow."
        )

    def _refused(self, exc: Exception, where: str) -> VoiceCliError:
        """The request failed before any of the reply came."""
        import openai

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
            return VoiceCliError(self._no_answer(where))
        if isinstance(exc, openai.APIConnectionError):
            return VoiceCliError(
                f"Cannot reach the LLM server at {where} ({type(exc).__name__}). "
                "Check --base-url and that the server is running."
            )
        if isinstance(exc, openai.APIStatusError):
            return VoiceCliError(f"{where} answered HTTP {exc.status_code}: {_short(exc.message)}")
        return VoiceCliError(f"The LLM request to {where} failed: {_short(str(exc))}")

    def _broken(self, exc: Exception, where: str) -> VoiceCliError:
        """The reply broke off after it had started."""
        import openai

        if isinstance(exc, openai.APIConnectionError):
            return VoiceCliError(
                f"The connection to the LLM server at {where} broke off mid-reply; what had "
                "arrived was spoken."
            )
        if isinstance(exc, openai.APIError):
            return VoiceCliError(f"The LLM stream from {where} failed: {_short(str(exc))}")
        return VoiceCliError(f"The LLM stream from {where} broke off ({type(exc).__name__}).")


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
