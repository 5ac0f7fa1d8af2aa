"""The streaming handoff, end to end: a real OpenAI-protocol server on 127.0.0.1,
the real openai client, the real segmenter, real Kokoro code (tiny model)."""

from __future__ import annotations

import threading
import time

import pytest

from tests.faulty_llm import BreakingLLM, FailingLLM
from tests.wavfile import read_wav
from voicecli.audio.sinks import WavSink
from voicecli.bench.scripted_llm import Script, ScriptedLLM
from voicecli.cancel import CancelToken
from voicecli.llm.openai_chat import OpenAIChat
from voicecli.pipeline import SpeechPipeline, TurnOptions
from voicecli.timeline import PLAYED, QUEUED, SENTENCE_READY, TURN_END, Timeline

REPLY = (
    "Sure, I can help. The first step is to open the settings page. "
    "Then choose the network tab and look for the proxy option. "
    "After that, save the change and restart the program. "
    "That should fix it for good."
)


def run_turn(synth, sink, server, *, buffered=False, cancel=None, fast_first=False):
    cancel = cancel or CancelToken()
    timeline = Timeline("test")
    client = OpenAIChat(base_url=server.base_url, api_key="test", model="scripted")
    source = client.stream([{"role": "user", "content": "help"}], cancel, timeline)
    result = SpeechPipeline(synth, sink).run(
        source,
        TurnOptions(buffered=buffered, fast_first=fast_first),
        cancel=cancel,
        timeline=timeline,
    )
    return result


@pytest.fixture
def wav_sink(tmp_path, tiny_synth):
    sink = WavSink(tmp_path / "out.wav", tiny_synth.sample_rate)
    yield sink
    sink.close()


def slow_script() -> Script:
    # A pause early in the second sentence, as when the model calls a tool:
    # speech of the first must not wait for it.
    script = Script.from_text(REPLY, tokens_per_second=40)
    script.pauses[len(Script.from_text("Sure, I can help. The first").tokens)] = 3.0
    return script


def test_streaming_queues_first_audio_before_the_last_token(tiny_synth, wav_sink):
    with ScriptedLLM(slow_script()) as server:
        result = run_turn(tiny_synth, wav_sink, server)
        served = server.last
    tl = result.timeline
    assert result.error is None
    assert [s.display for s in result.sentences][0] == "Sure, I can help."
    assert len(result.sentences) == 5
    assert tl.first(QUEUED, 0) < served.sent_at[-1], "first audio waited for the whole reply"
    # Released as soon as the token after its full stop settled the boundary.
    assert tl.first(SENTENCE_READY, 0) < served.sent_at[7]


def test_buffered_queues_nothing_until_the_reply_is_complete(tiny_synth, wav_sink):
    with ScriptedLLM(slow_script()) as server:
        result = run_turn(tiny_synth, wav_sink, server, buffered=True)
        served = server.last
    tl = result.timeline
    assert result.error is None
    assert len(result.sentences) == 5
    assert tl.first(SENTENCE_READY) > served.sent_at[-1]
    assert tl.first(QUEUED) > served.sent_at[-1]


def test_streaming_and_buffered_write_the_same_audio(tiny_synth, tmp_path):
    outputs = []
    for buffered in (False, True):
        path = tmp_path / f"{buffered}.wav"
        sink = WavSink(path, tiny_synth.sample_rate)
        with ScriptedLLM(Script.from_text(REPLY, tokens_per_second=400)) as server:
            run_turn(tiny_synth, sink, server, buffered=buffered)
        sink.close()
        outputs.append(read_wav(path)[0])
    # Kokoro's source module adds random noise, so compare durations, not samples:
    # the same sentences with the same voice give the same phoneme durations.
    assert len(outputs[0]) == len(outputs[1]) > 0


def test_interrupt_closes_the_llm_stream_and_drops_queued_work(tiny_synth, wav_sink):
    cancel = CancelToken()
    with ScriptedLLM(slow_script()) as server:

        def interrupt_when_first_sentence_is_ready():
            deadline = time.monotonic() + 60
            while not server.requests and time.monotonic() < deadline:
                time.sleep(0.01)
            while len(server.requests[-1].sent_at) < 8 and time.monotonic() < deadline:
                time.sleep(0.01)
            cancel.cancel("key")

        threading.Thread(target=interrupt_when_first_sentence_is_ready, daemon=True).start()
        started = time.monotonic()
        result = run_turn(tiny_synth, wav_sink, server, cancel=cancel)
        ended = time.monotonic()
        time.sleep(0.3)
        served = server.last
    assert result.interrupted
    assert served.finished_at is None, "the server finished: the stream was not closed"
    assert len(served.sent_at) < len(slow_script().tokens)
    assert result.timeline.first(TURN_END) is not None
    assert ended - started < 20
    assert len(result.sentences) <= 2


@pytest.mark.parametrize(
    "status, words", [(401, "API key"), (429, "rate limiting"), (500, "HTTP 500")]
)
def test_llm_http_errors_are_clear(tiny_synth, wav_sink, status, words):
    with FailingLLM(Script.from_text("Hello."), status) as server:
        result = run_turn(tiny_synth, wav_sink, server)
    assert result.error is not None and words in str(result.error)
    assert not result.sentences


def test_error_mid_stream_keeps_what_was_said(tiny_synth, wav_sink):
    script = Script.from_text(REPLY, tokens_per_second=200)
    with BreakingLLM(script, after=20, how="error") as server:
        result = run_turn(tiny_synth, wav_sink, server)
    assert result.error is not None and "failed" in str(result.error)
    assert result.sentences and result.sentences[0].display == "Sure, I can help."


@pytest.mark.parametrize(
    "how, words",
    [
        ("surrogate", "sent text that is not valid Unicode"),
        ("not-json", "sent something that is not an OpenAI chat stream"),
    ],
)
def test_a_stream_that_is_not_text_is_said_in_one_line(tiny_synth, wav_sink, how, words):
    script = Script.from_text(REPLY, tokens_per_second=200)
    with BreakingLLM(script, after=20, how=how) as server:
        result = run_turn(tiny_synth, wav_sink, server)
    assert result.error is not None and words in str(result.error), result.error
    assert "\n" not in str(result.error) and "Decode" not in str(result.error)
    assert result.sentences[0].display == "Sure, I can help."  # what came is kept


def test_unreachable_llm_server_is_clear(tiny_synth, wav_sink):
    cancel, timeline = CancelToken(), Timeline()
    client = OpenAIChat(base_url="http://127.0.0.1:9/v1", api_key="x", model="m", max_retries=0)
    result = SpeechPipeline(tiny_synth, wav_sink).run(
        client.stream([{"role": "user", "content": "hi"}], cancel, timeline),
        TurnOptions(),
        cancel=cancel,
        timeline=timeline,
    )
    assert result.error is not None and "Cannot reach" in str(result.error)


def test_warming_up_asks_with_the_system_prompt_alone_and_never_fails():
    with ScriptedLLM(Script.from_text("Hi.", tokens_per_second=1000)) as server:
        OpenAIChat(base_url=server.base_url, api_key="t", model="scripted").warm_up("Be brief.")
        assert [s.messages for s in server.requests] == [
            [{"role": "system", "content": "Be brief."}]
        ]
    dead = OpenAIChat(base_url="http://127.0.0.1:9/v1", api_key="x", model="m", max_retries=0)
    dead.warm_up("Be brief.")  # the conversation's own request will say what is wrong


def test_played_is_marked_for_every_sentence(tiny_synth, wav_sink):
    with ScriptedLLM(Script.from_text(REPLY, tokens_per_second=400)) as server:
        result = run_turn(tiny_synth, wav_sink, server)
    for s in result.sentences:
        assert result.timeline.first(PLAYED, s.index) >= result.timeline.first(QUEUED, s.index)
