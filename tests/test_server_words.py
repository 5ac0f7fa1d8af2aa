"""Word timings over voicecli's protocol: the tiny English Kokoro behind the real server,
a real WebSocket, and the real client. Remote synthesis must time words as local
synthesis does, and clients that never asked for them must see nothing new."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server_harness import RunningServer, kokoro_server, recv, speak, ws_connect
from voicecli import protocol as p
from voicecli.cancel import CancelToken
from voicecli.frames import Sentence
from voicecli.timeline import Timeline
from voicecli.tts.remote import WebSocketSynthesizer

TEXT = "Hello there, this is the first one."


@pytest.fixture(scope="module")
def english(tiny_model_dir: Path) -> Iterator[RunningServer]:
    with kokoro_server(tiny_model_dir, "af_tiny", "a") as running:
        yield running


def replies(ws, request_id: str) -> list:
    """Every message of one request, its sentence_done (or error) last."""
    out = []
    while True:
        message = recv(ws)
        out.append(message)
        if isinstance(message, dict) and message.get("type") in (p.SENTENCE_DONE, p.ERROR):
            assert message.get("request_id") == request_id
            return out


def test_a_client_that_asks_gets_typed_word_timings_before_the_end(english) -> None:
    with ws_connect(english) as ws:
        ws.send(speak("w", TEXT, words=p.WORDS_FORMAT))
        messages = replies(ws, "w")
    words = [m for m in messages if isinstance(m, dict) and m["type"] == p.WORDS]
    done = messages[-1]
    assert words and all(m["request_id"] == "w" and m["format"] == 1 for m in words)
    timed = [w for m in words for w in p.decode_words(m)]
    assert [t for t, _, _ in timed] == ["Hello", "there", "this", "is", "the", "first", "one"]
    assert all(0 <= a < b <= done["samples"] for _, a, b in timed)


def test_an_old_client_gets_no_new_messages_and_a_bad_ask_is_refused(english) -> None:
    with ws_connect(english) as ws:
        ws.send(speak("o", TEXT))  # as voicecli's clients did before word timings
        kinds = {m["type"] for m in replies(ws, "o") if isinstance(m, dict)}
        assert kinds == {p.SENTENCE_DONE}
        for bad in ("yes", 0, True, [1]):
            ws.send(speak("b", TEXT, words=bad))
            (error,) = replies(ws, "b")
            assert error["code"] == p.BAD_REQUEST and "words" in error["message"]
        ws.send(json.dumps({"type": "end"}))


@pytest.mark.parametrize(
    "message",
    [
        {"format": 2, "words": [{"text": "a", "start": 0, "end": 1}]},  # a newer format
        {"format": 1, "words": [{"text": "a", "start": 5, "end": 1}]},
        {"format": 1, "words": [{"text": "a", "start": -1, "end": 1}]},
        {"format": 1, "words": [{"text": 3, "start": 0, "end": 1}]},
        {"format": 1, "words": {"text": "a"}},
        {"format": 1, "words": ["a"]},
    ],
)
def test_word_timings_this_client_cannot_read_are_ignored(message) -> None:
    assert p.decode_words({"type": p.WORDS, "request_id": "r", **message}) is None


def test_remote_words_are_the_local_synthesizers(english, tiny_synth) -> None:
    # The same model and voice on both sides, one first sentence each: same audio, so
    # the same words at the same samples (the client adds nothing of its own).
    sentence = [Sentence(0, TEXT, TEXT)]
    remote = WebSocketSynthesizer(english.ws_url)
    there = list(remote.stream(sentence, CancelToken(), Timeline()))
    here = list(tiny_synth.stream(sentence, CancelToken(), Timeline()))
    assert [w for c in there for w in c.words] == [w for c in here for w in c.words]
    for c in there:  # each word in the chunk its audio starts in
        assert all(c.offset <= w.start < c.offset + c.samples.size for w in c.words) or c.last
