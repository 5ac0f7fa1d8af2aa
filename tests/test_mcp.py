"""`voicecli mcp` driven by the MCP SDK's own stdio client, as an agent drives it: speech
through the resident engine onto a real (virtual) sound card, and the user's answers
spoken into the room's microphone, heard by the real VAD and Whisper."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest

from tests.listen_harness import QUESTION, same_words

pytest.importorskip("mcp")
pytest.importorskip("faster_whisper")

LONG = "This is a long answer that goes on and on, and then on some more. " * 6


def mcp_session(
    env: dict[str, str], tiny_model_dir, *more: str
) -> Callable[[Callable[[Any], Awaitable[None]]], None]:
    """Run ``body(session)`` against a `voicecli mcp` of its own."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    args = ["-m", "voicecli", "mcp", "--model-dir", str(tiny_model_dir), "--voice", "af_tiny"]
    params = StdioServerParameters(
        command=sys.executable,
        args=[*args, "--device", "pulse", *more],
        env={**os.environ, **env},
    )

    def run(body: Callable[[Any], Awaitable[None]]) -> None:
        async def main() -> None:
            async with stdio_client(params) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    await body(session)

        anyio.run(main)

    return run


def said_later(room, path, sounded: float, quiet: float = 0.0) -> threading.Thread:
    """The user says ``path`` into the room once the speakers have sounded ``sounded``
    seconds, and then been quiet ``quiet`` seconds."""

    def say() -> None:
        room.wait_for_speakers(sounded, quiet)
        room.say(path)

    thread = threading.Thread(target=say, daemon=True)
    thread.start()
    return thread


def test_an_agent_speaks_hears_the_answer_and_is_talked_over(
    room, utterances, tiny_model_dir, tiny_engine
):
    run = mcp_session({**room.env, **tiny_engine}, tiny_model_dir, "--headphones")

    async def body(session: Any) -> None:
        names = {tool.name for tool in (await session.list_tools()).tools}
        assert names == {"speak", "converse", "listen", "stop"}

        spoken = await session.call_tool("speak", {"text": "Hello there."})
        assert not spoken.is_error, spoken.content
        assert spoken.structured_content == {"heard": "Hello there.", "interrupted": False}

        # Asked, then answered once the question has been said.
        answer = said_later(room, utterances["question"], 0.3, quiet=0.5)
        asked = await session.call_tool("converse", {"text": "What would you like?"})
        answer.join()
        result = asked.structured_content
        assert not asked.is_error and result["interrupted"] is False, asked.content
        assert same_words(result["transcript"], QUESTION), result

        # Talked over: the speech stops, what was heard of it is said, and the user's
        # words are the answer.
        over = said_later(room, utterances["question"], 1.0)
        began = time.monotonic()
        asked = await session.call_tool("converse", {"text": LONG, "timeout": 20})
        over.join()
        result = asked.structured_content
        assert not asked.is_error, asked.content
        assert result["interrupted"] is True and len(result["heard"]) < len(LONG) / 2, result
        assert LONG.startswith(result["heard"].rstrip(".")[: len(result["heard"]) // 2])
        assert same_words(result["transcript"], QUESTION), result
        assert time.monotonic() - began < 15

        # Nothing said: a clear tool error.
        silent = await session.call_tool("listen", {"timeout": 1.0})
        assert silent.is_error and "No speech was heard within 1 s." in silent.content[0].text

    run(body)


def test_speech_never_overlaps_stop_silences_it_and_mistakes_are_tool_errors(
    room, tiny_model_dir, tiny_engine
):
    run = mcp_session({**room.env, **tiny_engine}, tiny_model_dir, "--input-device", "nosuch")

    async def body(session: Any) -> None:
        began = time.monotonic()
        first = await session.call_tool("speak", {"text": LONG, "wait": False})
        assert first.structured_content == {"speaking": True}
        assert time.monotonic() - began < 1.0  # at once
        await anyio.sleep(1.0)
        stopped = await session.call_tool("stop", {})
        assert stopped.structured_content == {"stopped": True}
        # The next waits for nothing now: the long text was silenced.
        began = time.monotonic()
        after = await session.call_tool("speak", {"text": "Done."})
        assert after.structured_content == {"heard": "Done.", "interrupted": False}
        assert time.monotonic() - began < 8.0

        # Two in a row, the first not waited for: the second starts after it.
        await session.call_tool("speak", {"text": "One, two, three, four.", "wait": False})
        began = time.monotonic()
        await session.call_tool("speak", {"text": "Five."})
        both = time.monotonic() - began
        alone = time.monotonic()
        await session.call_tool("speak", {"text": "Five."})
        alone = time.monotonic() - alone
        assert both > alone + 0.5, (both, alone)

        for tool, arguments, words in [
            ("speak", {"text": ""}, "Nothing to say"),
            ("speak", {"text": "Hi.", "voice": "../voices/x"}, "Unknown voice"),
            ("listen", {"timeout": 5}, "nosuch"),  # no such microphone
            ("listen", {"timeout": 0}, "timeout must be"),
        ]:
            result = await session.call_tool(tool, arguments)
            assert result.is_error and words in result.content[0].text, (tool, result.content)
            assert "Traceback" not in result.content[0].text

    run(body)
