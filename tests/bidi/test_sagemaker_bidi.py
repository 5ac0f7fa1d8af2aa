"""InvokeEndpointWithBidirectionalStream with the real AWS client, through the runtime
stand-in, to a real `voicecli serve` on the real weights (see conftest.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import wave
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip(
    "aws_sdk_sagemaker_runtime_http2",
    reason="the bidirectional client needs Python 3.12+: scripts/test.sh runs these in .venv-bidi",
)

import trustme  # noqa: E402 - where the client is, the stand-in's parts are too

from tests.bidi.conftest import ACCESS_KEY, Container  # noqa: E402
from tests.sagemaker_standin import StandIn, StandInThread  # noqa: E402
from voicecli import protocol as p  # noqa: E402
from voicecli.cancel import CancelToken  # noqa: E402
from voicecli.errors import VoiceCliError  # noqa: E402
from voicecli.frames import AudioChunk, Sentence  # noqa: E402
from voicecli.timeline import SYNTH_END, SYNTH_FIRST_CHUNK, SYNTH_START, Timeline  # noqa: E402
from voicecli.tts.sagemaker import SageMakerSynthesizer  # noqa: E402

pytestmark = pytest.mark.slow
LONG = "This sentence goes on and on, with many words, so that it takes a long while. " * 3


@pytest.fixture(scope="session")
def ca(tmp_path_factory: pytest.TempPathFactory) -> trustme.CA:
    """One test CA for the session: the client's TLS reads SSL_CERT_FILE once."""
    authority = trustme.CA()
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    authority.cert_pem.write_to_path(str(path))
    os.environ["SSL_CERT_FILE"] = str(path)
    return authority


@pytest.fixture
def runtime(container: Container, ca: trustme.CA) -> Iterator[StandIn]:
    """The stand-in, relaying to the real container; pings every 0.5 s instead of 60."""
    with StandInThread(
        container.url, ping_interval=0.5, endpoints={"voicecli"}, access_key=ACCESS_KEY, ca=ca
    ) as standin:
        yield standin


def synth(runtime: StandIn, endpoint: str = "voicecli") -> SageMakerSynthesizer:
    return SageMakerSynthesizer(
        endpoint, region="us-east-1", endpoint_url=runtime.url, api="bidirectional"
    )


def speak_all(
    s: SageMakerSynthesizer, texts: Iterable[str], timeline: Timeline | None = None
) -> list[AudioChunk]:
    sentences = (Sentence(i, text) for i, text in enumerate(texts))
    return list(s.stream(sentences, CancelToken(), timeline or Timeline()))


def settled(condition: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def audio_of(chunks: list[AudioChunk], sentence: int) -> np.ndarray:
    return np.concatenate([c.samples for c in chunks if c.sentence == sentence])


def test_real_audio_comes_back_with_the_same_timeline_marks(runtime: StandIn) -> None:
    timeline = Timeline()
    s = synth(runtime)
    try:
        chunks = speak_all(s, ["Hello there.", "How are you today?"], timeline)
        again = speak_all(s, ["Once more."])  # a second turn on the same connection
    finally:
        s.close()
    for sentence in (0, 1):
        audio = audio_of(chunks, sentence)
        assert len(audio) > 0.4 * p.SAMPLE_RATE
        assert np.sqrt(np.mean(audio**2)) > 0.01  # speech, not silence
        assert [c.last for c in chunks if c.sentence == sentence][-1]
        for mark in (SYNTH_START, SYNTH_FIRST_CHUNK, SYNTH_END):
            assert timeline.first(mark, sentence) is not None, mark
    assert len(audio_of(again, 0)) > 0.3 * p.SAMPLE_RATE
    # voicecli sends control as UTF8 parts: text frames at the container. Audio comes
    # back in binary frames, control in text frames, and each stream ended cleanly.
    assert {kind for _, kind, _ in runtime.record.to_container} == {"text"}
    assert {kind for _, kind, _ in runtime.record.from_container} == {"text", "binary"}
    # The stand-in records a stream's end on its own loop, after the client has gone.
    assert settled(lambda: len(runtime.record.ended) == 2)
    assert runtime.record.ended == ["completed", "completed"]
    assert runtime.record.pings >= 1  # answered by the real container all along


def test_the_next_sentence_goes_out_while_the_last_one_still_streams(runtime: StandIn) -> None:
    s = synth(runtime)
    try:
        speak_all(s, ["The first sentence is long enough to take a while.", "Second one."])
    finally:
        s.close()
    speaks = [t for t, kind, _ in runtime.record.to_container if kind == "text"]
    audio = [t for t, kind, _ in runtime.record.from_container if kind == "binary"]
    assert len(speaks) == 3  # speak, speak, end
    assert speaks[1] < audio[0]  # not lockstep: no waiting for the first answer


def test_partial_response_parts_are_joined_into_frames(runtime: StandIn) -> None:
    s = synth(runtime)
    try:
        whole = audio_of(speak_all(s, ["Split me up."]), 0)
        runtime.response_part_bytes = 1000  # every frame arrives in PARTIAL pieces
        pieces = audio_of(speak_all(s, ["Split me up."]), 0)
    finally:
        s.close()
    assert len(pieces) == len(whole) > 0


async def raw_turn(runtime: StandIn, parts: list[Any]) -> list[Any]:
    """The SDK alone: send ``parts`` as RequestPayloadParts, collect what comes back."""
    from aws_sdk_sagemaker_runtime_http2.client import AsyncSageMakerRuntimeHTTP2Client
    from aws_sdk_sagemaker_runtime_http2.config import AsyncSageMakerRuntimeHTTP2Config
    from aws_sdk_sagemaker_runtime_http2.models import (
        InternalStreamFailure,
        InvokeEndpointWithBidirectionalStreamInput,
        ModelStreamError,
        RequestStreamEventPayloadPart,
        ResponseStreamEventPayloadPart,
    )
    from smithy_http.aio.crt import AWSCRTHTTPClient

    config = await AsyncSageMakerRuntimeHTTP2Config.resolve(
        endpoint_uri=runtime.url, region="us-east-1", transport=AWSCRTHTTPClient()
    )
    client = AsyncSageMakerRuntimeHTTP2Client(config=config)
    stream = await client.invoke_endpoint_with_bidirectional_stream(
        InvokeEndpointWithBidirectionalStreamInput(endpoint_name="voicecli")
    )
    for part in parts:
        await stream.input_stream.send(RequestStreamEventPayloadPart(value=part))
    _, receiver = await stream.await_output()
    received: list[Any] = []
    try:
        async for event in receiver:
            assert isinstance(event, ResponseStreamEventPayloadPart)
            received.append(p.decode_server_frame(event.value.bytes_))
            if received[-1] == p.control(p.DONE):
                break
    except (ModelStreamError, InternalStreamFailure) as exc:  # raised, not yielded
        received.append(exc)
    await stream.close()
    await client.close()
    return received


def part(data: bytes, **fields: str) -> Any:
    from aws_sdk_sagemaker_runtime_http2.models import RequestPayloadPart

    return RequestPayloadPart(bytes_=data, **fields)


def test_binary_and_partial_request_parts_reach_the_container(runtime: StandIn) -> None:
    speak = json.dumps({"type": "speak", "request_id": "r1", "text": "Binary frames work."})
    cut = json.dumps({"type": "speak", "request_id": "r2", "text": "And parts."}).encode()
    end = json.dumps({"type": "end"}).encode()
    replies = asyncio.run(
        raw_turn(
            runtime,
            [
                # No DataType: BINARY, SageMaker's default, and a binary frame at the
                # container, which must take JSON in it. Then a speak cut in two parts.
                part(speak.encode()),
                part(cut[:20], completion_state="PARTIAL"),
                part(cut[20:], completion_state="COMPLETE"),
                part(end, data_type="UTF8"),
            ],
        )
    )
    assert [kind for _, kind, _ in runtime.record.to_container] == ["binary", "binary", "text"]
    done = [m for m in replies if isinstance(m, dict) and m["type"] == p.SENTENCE_DONE]
    assert [m["request_id"] for m in done] == ["r1", "r2"]
    audio = [m for m in replies if isinstance(m, p.AudioFrame)]
    assert {a.request_id for a in audio} == {"r1", "r2"}


def test_a_container_that_closes_is_a_model_stream_error(runtime: StandIn) -> None:
    from aws_sdk_sagemaker_runtime_http2.models import ModelStreamError

    # A frame over the container's limit (Limits.max_message_bytes, 28 KB): it closes with 1009.
    huge = json.dumps({"type": "speak", "request_id": "big", "text": "a" * 40000})
    replies = asyncio.run(raw_turn(runtime, [part(huge.encode(), data_type="UTF8")]))
    assert isinstance(replies[-1], ModelStreamError)
    assert "1009" in replies[-1].message


def test_cancel_mid_sentence_ends_the_stream_and_frees_the_container(runtime: StandIn) -> None:
    s = synth(runtime)
    cancel = CancelToken()
    received = []
    try:
        for chunk in s.stream(iter([Sentence(0, LONG)]), cancel, Timeline()):
            received.append(chunk)
            cancelled_at = time.monotonic()
            cancel.cancel("user")
        deadline = time.monotonic() + 5
        while not runtime.record.ended and time.monotonic() < deadline:
            time.sleep(0.02)
        assert runtime.record.ended == ["completed"]  # the stream went down with the cancel
        # and the container was told, whatever SageMaker does with its WebSocket afterwards
        assert [json.loads(t)["type"] for t in runtime.record.texts][-1:] == ["cancel"]
        assert time.monotonic() - cancelled_at < 2
        # The container dropped the rest: a new turn is answered at once, not after it.
        start = time.monotonic()
        assert audio_of(speak_all(s, ["Next."]), 0).size > 0
        assert time.monotonic() - start < 10
    finally:
        s.close()
    assert len(received) == 1


def test_a_container_that_stops_answering_pings_is_a_clear_error(
    container: Container, ca: Any
) -> None:
    with StandInThread(container.url, ping_interval=0.2, access_key=ACCESS_KEY, ca=ca) as rt:
        s = synth(rt)
        sentences = iter([Sentence(0, LONG)])
        try:
            with pytest.raises(VoiceCliError) as failure:
                for _ in s.stream(sentences, CancelToken(), Timeline()):
                    container.pause()  # mid-sentence: it answers nothing from now on
        finally:
            container.resume()
            s.close()
    assert rt.record.ended[0] == "ModelStreamError"
    assert "failed mid-stream" in str(failure.value) and "5 pings" in str(failure.value)


def test_errors_before_the_stream_say_what_to_do(
    runtime: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(VoiceCliError, match="'nope'.*refused.*--sagemaker-endpoint"):
        speak_all(synth(runtime, "nope"), ["Hello."])
    runtime.throttle = True
    with pytest.raises(VoiceCliError, match="throttling.*instance count"):
        speak_all(synth(runtime), ["Hello."])
    runtime.throttle = False
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDSOMEONEELSE")
    with pytest.raises(VoiceCliError, match="refused access.*UnrecognizedClient.*credentials"):
        speak_all(synth(runtime), ["Hello."])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    runtime.container_ws = "ws://127.0.0.1:9/invocations-bidirectional-stream"
    with pytest.raises(VoiceCliError, match="container behind.*unreachable"):
        speak_all(synth(runtime), ["Hello."])
    with pytest.raises(VoiceCliError, match="Cannot reach the SageMaker runtime.*REFUSED"):
        speak_all(
            SageMakerSynthesizer(
                "voicecli", endpoint_url="https://127.0.0.1:9", api="bidirectional"
            ),
            ["Hello."],
        )


def test_a_refused_endpoint_is_one_line_from_the_cli(runtime: StandIn, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "voicecli", "say", "--sagemaker-endpoint", "nope"]
        + ["--endpoint-url", runtime.url, "--sagemaker-api", "bidirectional"]
        + ["--output", str(tmp_path / "x.wav"), "Hello."],
        env=os.environ | {"VOICECLI_VOICE": "jf_alpha"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "'nope'" in result.stderr and "--sagemaker-endpoint" in result.stderr


def test_say_writes_speech_from_the_endpoint(runtime: StandIn, tmp_path: Path) -> None:
    out = tmp_path / "hello.wav"
    result = subprocess.run(
        [sys.executable, "-m", "voicecli", "say", "--sagemaker-endpoint", "voicecli"]
        + ["--endpoint-url", runtime.url, "--sagemaker-api", "bidirectional"]
        + ["--output", str(out), "Hello from SageMaker.", "It streams both ways."],
        env=os.environ | {"VOICECLI_VOICE": "jf_alpha"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    with wave.open(str(out)) as w:
        assert w.getframerate() == p.SAMPLE_RATE
        samples = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    assert len(samples) > 1.5 * p.SAMPLE_RATE and np.abs(samples).max() > 1000
