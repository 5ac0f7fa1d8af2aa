"""Text sources: an OpenAI-compatible streaming chat, stdin as it arrives, arguments.

Each source is an iterator of text pieces. It marks REQUEST_SENT and
FIRST_TOKEN on the turn timeline and stops when the cancel token fires.
"""

from __future__ import annotations

import codecs
import logging
import os
from collections.abc import Iterator
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
        # ``timeout`` bounds each wait: the connection, the first byte, and each gap
        # between pieces of the reply. A server that never answers is reported, not awaited.
        self.timeout = timeout
        http_client = None
        if socket is not None:  # the embedded model, on its private Unix socket
            import httpx

            http_client = httpx.Client(transport=httpx.HTTPTransport(uds=socket))
        self.client = OpenAI(
            base_url=base_url,
            api_key=api_key or "not-needed",
            timeout=timeout,
            max_retries=max_retries,
            http_client=http_client,
        )

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
        import openai

        extra: dict[str, Any] = {}
        if self.temperature is not None:
            extra["temperature"] = self.temperature
        if self.max_tokens is not None:
            extra["max_tokens"] = self.max_tokens
        where = self.where
        timeline.mark(REQUEST_SENT)
        try:
            response = self.client.chat.completions.create(
                model=self.model, messages=messages, stream=True, **extra
            )
        except openai.AuthenticationError:
            raise VoiceCliError(
                f"{where} refused the API key (HTTP 401). Set OPENAI_API_KEY or api_key "
                "in the config file, or use --llm local for the embedded model."
            ) from None
        except openai.RateLimitError:
            raise VoiceCliError(
                f"{where} is rate limiting this key (HTTP 429). Wait and retry, or check "
                "the account's quota."
            ) from None
        except openai.NotFoundError:
            raise VoiceCliError(
                f"{where} does not know model {self.model!r} or the chat endpoint (HTTP 404). "
                "Check --model and --base-url."
            ) from None
        except openai.APITimeoutError:
            raise VoiceCliError(
                f"The LLM server at {where} did not answer within {self.timeout:g} s. It may be "
                "overloaded or stuck; raise llm_timeout if it is just slow."
            ) from None
        except openai.APIConnectionError as exc:
            raise VoiceCliError(
                f"Cannot reach the LLM server at {where} ({type(exc).__name__}). "
                "Check --base-url and that the server is running."
            ) from None
        except openai.APIStatusError as exc:
            raise VoiceCliError(
                f"{where} answered HTTP {exc.status_code}: {_short(exc.message)}"
            ) from None
        # Closing the response aborts the HTTP read this thread may be blocked in.
        cancel.on_cancel(response.close)
        first = True
        finished = False  # the server said the reply is complete (a finish reason)
        try:
            for chunk in response:
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
        except openai.APITimeoutError:
            if cancel.cancelled:
                return
            raise VoiceCliError(
                f"The LLM server at {where} stopped sending its reply for {self.timeout:g} s; "
                "the reply was cut off there."
            ) from None
        except openai.APIConnectionError:
            if cancel.cancelled:
                return
            raise VoiceCliError(
                f"The connection to the LLM server at {where} broke off mid-reply; what had "
                "arrived was spoken."
            ) from None
        except openai.APIError as exc:
            if cancel.cancelled:
                return
            raise VoiceCliError(f"The LLM stream from {where} failed: {_short(str(exc))}") from None
        except Exception as exc:  # noqa: BLE001 - httpx errors after close() or a dropped link
            if cancel.cancelled:
                return
            raise VoiceCliError(
                f"The LLM stream from {where} broke off ({type(exc).__name__})."
            ) from None
        finally:
            response.close()
        if not finished and not cancel.cancelled:
            raise VoiceCliError(
                f"The reply from {where} was cut off: the stream ended before the server "
                "said it was complete. What had arrived was spoken."
            )


def _short(text: str | None, limit: int = 200) -> str:
    line = (text or "").strip().splitlines()[0] if text and text.strip() else "no details"
    return line[:limit]
