"""SageMakerSynthesizer over boto3's response stream, against a local event-stream server."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.sagemaker_fake_runtime import Event, FakeRuntime, relay
from tests.server_harness import RunningServer, StandInModel
from voicecli import protocol as p
from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import Sentence
from voicecli.timeline import SYNTH_END, SYNTH_FIRST_CHUNK, SYNTH_START, Timeline
from voicecli.tts.sagemaker import SageMakerSynthesizer
from voicecli.tts.steps import AudioPart


@pytest.fixture(autouse=True)
def dummy_aws(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # noqa: ANN001
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def frames_for(request: dict[str, Any], pieces: int = 3) -> bytes:
    """The container's framed answer for one sentence: audio frames, then sentence_done."""
    rid = request["request_id"]
    out = b""
    for seq in range(pieces):
        pcm = p.to_pcm16(np.full(240, 0.25 * (seq + 1), np.float32))
        out += p.length_prefixed(p.encode_audio_frame(rid, seq, pcm))
    done = p.control(
        p.SENTENCE_DONE, request_id=rid, frames=pieces, samples=240 * pieces, cancelled=False
    )
    return out + p.length_prefixed(p.encode_control_frame(done))


def split_everywhere(data: bytes) -> list[Event]:
    """PayloadParts cut inside length prefixes, headers and PCM, plus one merged part."""
    cuts = [1, 2, 3, 5, 7, 11, 40, 300, 301]
    parts, start = [], 0
    for cut in cuts:
        parts.append(("part", data[start:cut]))
        start = cut
    parts.append(("part", data[start:]))
    return parts


def synth(runtime: FakeRuntime, name: str = "kokoro", **kwargs: Any) -> SageMakerSynthesizer:
    return SageMakerSynthesizer(
        name, region="us-east-1", endpoint_url=runtime.url, api="response-stream", **kwargs
    )


def run(
    s: SageMakerSynthesizer,
    texts: list[str],
    cancel: CancelToken | None = None,
    timeline: Timeline | None = None,
) -> list:
    sentences = [Sentence(i, t) for i, t in enumerate(texts)]
    return list(s.stream(iter(sentences), cancel or CancelToken(), timeline or Timeline()))


def test_payload_parts_split_inside_frames_are_reassembled() -> None:
    with FakeRuntime(lambda endpoint, body: split_everywhere(frames_for(body))) as runtime:
        timeline = Timeline()
        chunks = run(
            synth(runtime, voice="af_heart", speed=1.25), ["Hello.", "Bye."], timeline=timeline
        )
    assert [(c.sentence, len(c.samples), c.last) for c in chunks] == [
        (0, 240, False),
        (0, 240, False),
        (0, 240, False),
        (0, 0, True),
        (1, 240, False),
        (1, 240, False),
        (1, 240, False),
        (1, 0, True),
    ]
    assert np.allclose(chunks[1].samples, 0.5)
    # Requests run concurrently, so they may arrive in any order.
    sent = sorted((body for _, body in runtime.requests), key=lambda b: b["request_id"])
    assert [b["text"] for b in sent] == ["Hello.", "Bye."]
    assert sent[0]["voice"] == "af_heart" and sent[0]["speed"] == 1.25
    for i in (0, 1):
        assert timeline.first(SYNTH_START, i) <= timeline.first(SYNTH_FIRST_CHUNK, i)
        assert timeline.first(SYNTH_FIRST_CHUNK, i) <= timeline.first(SYNTH_END, i)


def test_one_sentence_is_asked_for_at_a_time_so_the_container_serves_them_in_order() -> None:
    # Each request is a client of its own to the container, which would share its model
    # between sentences asked for together and starve the one playing.
    def slow(endpoint: str, body: dict[str, Any]) -> list[Event]:
        data = frames_for(body)
        return [("part", data[:50]), ("sleep", 0.3), ("part", data[50:])]

    with FakeRuntime(slow) as runtime:
        chunks = run(synth(runtime), ["One.", "Two.", "Three."])
    assert [c.sentence for c in chunks if c.last] == [0, 1, 2]
    sent = [t for t, _ in runtime.requests]
    assert [b["request_id"][-1] for _, b in runtime.requests] == ["0", "1", "2"]
    assert all(b - a >= 0.3 for a, b in itertools.pairwise(sent))


def test_end_to_end_through_the_real_container_stream() -> None:
    class Sine(StandInModel):
        def speak_steps(
            self, chunks: list[str], cancel: Any = None, voice: Any = None, speed: Any = None
        ) -> Iterator[AudioPart]:
            yield AudioPart(np.sin(np.arange(7000, dtype=np.float32) / 10) * 0.5)

    container = RunningServer(Sine).start()
    container.wait_ready()
    try:
        with FakeRuntime(relay(container.http_url)) as runtime:
            chunks = run(synth(runtime), ["Hello there."])
    finally:
        container.stop()
    audio = np.concatenate([c.samples for c in chunks])
    assert len(audio) == 7000 and chunks[-1].last
    assert np.abs(audio - np.sin(np.arange(7000) / 10) * 0.5).max() < 1e-3


def test_cancel_closes_the_streams_and_stops() -> None:
    def endless(endpoint: str, body: dict[str, Any]) -> list[Event]:
        data = frames_for(body, pieces=50)
        return [
            e
            for i in range(0, len(data), 600)
            for e in (("part", data[i : i + 600]), ("sleep", 0.05))
        ]

    cancel = CancelToken()
    with FakeRuntime(endless) as runtime:
        s = synth(runtime)
        received = []
        for chunk in s.stream(
            iter([Sentence(0, "Long."), Sentence(1, "More.")]), cancel, Timeline()
        ):
            received.append(chunk)
            cancel.cancel("user")
    assert len(received) == 1


@pytest.mark.parametrize(
    ("endpoint", "script", "match"),
    [
        ("missing", None, "does not exist.*--sagemaker-endpoint"),
        ("throttled", None, "throttling.*instance count"),
        (
            "kokoro",
            lambda e, b: [
                ("part", frames_for(b)[:100]),
                ("exception", "ModelStreamError", "model died"),
            ],
            "failed mid-stream.*model died",
        ),
        (
            "kokoro",
            lambda e, b: [("exception", "InternalStreamFailure", "oops")],
            "broke the stream.*Retry",
        ),
        ("kokoro", lambda e, b: [("part", frames_for(b)[:100])], "malformed stream"),
        (
            "kokoro",
            lambda e, b: [
                (
                    "part",
                    p.length_prefixed(
                        p.encode_control_frame(
                            p.control(
                                p.ERROR,
                                code=p.OVERLOADED,
                                message="queue full",
                                request_id=b["request_id"],
                            )
                        )
                    ),
                )
            ],
            "overloaded",
        ),
    ],
)
def test_remote_errors_become_clear_voicecli_errors(endpoint: str, script: Any, match: str) -> None:
    with FakeRuntime(script or (lambda e, b: [])) as runtime:
        with pytest.raises(VoiceCliError, match=match):
            run(synth(runtime, endpoint, max_attempts=1), ["Hello."])


def test_missing_credentials_and_region_say_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeRuntime(lambda e, b: []) as runtime:
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        with pytest.raises(VoiceCliError, match="No AWS credentials.*aws configure"):
            run(synth(runtime), ["Hello."])
    with pytest.raises(VoiceCliError, match="No AWS region.*--region"):
        SageMakerSynthesizer("kokoro", api="response-stream")


def test_bidirectional_api_needs_its_optional_package() -> None:
    with pytest.raises(VoiceCliError, match="aws-sdk-sagemaker-runtime-http2"):
        SageMakerSynthesizer("kokoro", region="us-east-1", api="bidirectional")
