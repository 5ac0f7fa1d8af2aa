"""WebSocketSynthesizer against a real `voicecli serve` (tiny Kokoro under uvicorn)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.server_harness import RunningServer, kokoro_server, speak, ws_connect
from voicecli.cancel import CancelToken
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.frames import Sentence
from voicecli.server.requests import Limits
from voicecli.server.run import bind, kokoro_factory
from voicecli.timeline import SYNTH_END, SYNTH_FIRST_CHUNK, SYNTH_START, Timeline
from voicecli.tts.remote import WebSocketSynthesizer, websocket_url

WAIT = 120  # seconds; generous for busy cores, never a speed assertion


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    with kokoro_server(tiny_model_dir, "ef_tiny", "e") as running:
        yield running


def test_audio_of_the_first_sentence_arrives_before_the_last_is_sent(server: RunningServer) -> None:
    timeline = Timeline()
    sent_last_at: list[float] = []

    def sentences() -> Iterator[Sentence]:
        yield Sentence(0, "Sí.")
        # Like an LLM still writing: the next sentence comes only after first audio.
        deadline = time.monotonic() + WAIT
        while timeline.first(SYNTH_FIRST_CHUNK, 0) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        sent_last_at.append(time.monotonic())
        yield Sentence(1, "No.")

    synth = WebSocketSynthesizer(server.ws_url, voice="am_tiny", speed=1.1)
    chunks = list(synth.stream(sentences(), CancelToken(), timeline))
    first_audio = timeline.first(SYNTH_FIRST_CHUNK, 0)
    assert first_audio is not None and first_audio < sent_last_at[0]
    assert [c.sentence for c in chunks if c.last] == [0, 1]
    assert [c.sentence for c in chunks] == sorted(c.sentence for c in chunks)
    assert all(c.samples.dtype == np.float32 for c in chunks)
    for i in (0, 1):
        start, first, end = (
            timeline.first(n, i) for n in (SYNTH_START, SYNTH_FIRST_CHUNK, SYNTH_END)
        )
        assert start is not None and first is not None and end is not None
        assert start <= first <= end


def test_sentences_are_sent_without_waiting_for_earlier_audio(server: RunningServer) -> None:
    timeline = Timeline()
    synth = WebSocketSynthesizer(server.ws_url)
    sentences = [Sentence(i, t) for i, t in enumerate(["Sí.", "No.", "Sí."])]
    chunks = list(synth.stream(iter(sentences), CancelToken(), timeline))
    assert [c.sentence for c in chunks if c.last] == [0, 1, 2]
    # Full duplex: every speak left before the first sentence's audio was complete.
    assert timeline.first(SYNTH_START, 2) < timeline.first(SYNTH_END, 0)


def test_cancel_stops_within_one_chunk_and_the_server_moves_on(server: RunningServer) -> None:
    timeline = Timeline()
    cancel = CancelToken()
    synth = WebSocketSynthesizer(server.ws_url)
    sentences = iter([Sentence(0, " ".join(["Sí."] * 6)), Sentence(1, "No. " * 4)])
    received = []
    for chunk in synth.stream(sentences, cancel, timeline):
        received.append(chunk)
        if len(received) == 1:
            cancel.cancel("user")
    assert len(received) == 1  # nothing is yielded after the cancel
    assert timeline.first(SYNTH_END, 0) is None
    # The server dropped the cancelled work: a new turn is answered.
    again = list(synth.stream(iter([Sentence(0, "No.")]), CancelToken(), Timeline()))
    assert again and again[-1].last


def test_a_failing_sentence_source_is_raised_to_the_consumer(server: RunningServer) -> None:
    def sentences() -> Iterator[Sentence]:
        yield Sentence(0, "Sí.")
        raise VoiceCliError("the LLM went away")

    with pytest.raises(VoiceCliError, match="LLM went away"):
        list(WebSocketSynthesizer(server.ws_url).stream(sentences(), CancelToken(), Timeline()))


def test_server_errors_become_clear_voicecli_errors(server: RunningServer) -> None:
    synth = WebSocketSynthesizer(server.ws_url, voice="zz_nobody")
    with pytest.raises(VoiceCliError, match="zz_nobody"):
        list(synth.stream(iter([Sentence(0, "Sí.")]), CancelToken(), Timeline()))


def test_a_busy_server_is_reported_as_such(tiny_model_dir: Path) -> None:
    running = RunningServer(kokoro_factory(Settings(voice="af_tiny", model_dir=tiny_model_dir)),
                            Limits(max_listeners=1)).start()  # fmt: skip
    try:
        running.wait_ready()
        with ws_connect(running) as holder:
            holder.send(speak("h0", "This one keeps the server's only place for a while."))
            synth = WebSocketSynthesizer(running.ws_url)
            with pytest.raises(VoiceCliError, match="is busy: it speaks for 1 listeners"):
                list(synth.stream(iter([Sentence(0, "b")]), CancelToken(), Timeline()))
    finally:
        running.stop()


def test_a_sentence_the_server_cuts_short_is_reported_and_the_turn_goes_on(
    tiny_model_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(voice="ef_tiny", lang="e", model_dir=tiny_model_dir)
    limits = Limits(base_request_seconds=0.1, seconds_per_char=0.0)  # every sentence runs past
    running = RunningServer(kokoro_factory(settings), limits).start()
    try:
        running.wait_ready()
        sentences = iter([Sentence(0, "Sí, sí, sí."), Sentence(1, "No, no, no.")])
        with caplog.at_level(logging.WARNING):
            chunks = list(
                WebSocketSynthesizer(running.ws_url).stream(sentences, CancelToken(), Timeline())
            )
        assert [c.sentence for c in chunks if c.last] == [0, 1]
        for i in (0, 1):
            assert sum(len(c.samples) for c in chunks if c.sentence == i) == 2400
        cuts = [r.getMessage() for r in caplog.records if "cut sentence" in r.getMessage()]
        assert len(cuts) == 2 and "cut sentence 1 short" in cuts[0]
    finally:
        running.stop()


def test_unreachable_or_malformed_endpoints_fail_clearly() -> None:
    free = bind("127.0.0.1", 0)
    port = free.getsockname()[1]
    free.close()
    with pytest.raises(VoiceCliError, match="voicecli serve"):
        list(
            WebSocketSynthesizer(f"ws://127.0.0.1:{port}", open_timeout=5).stream(
                iter([Sentence(0, "Sí.")]), CancelToken(), Timeline()
            )
        )
    with pytest.raises(VoiceCliError, match="ws://"):
        WebSocketSynthesizer("http://127.0.0.1:8080")
    assert websocket_url("ws://h:1") == "ws://h:1/invocations-bidirectional-stream"
    assert websocket_url("wss://h/custom") == "wss://h/custom"
