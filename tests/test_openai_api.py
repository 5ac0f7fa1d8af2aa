"""OpenAI's audio API on `voicecli serve`, driven by the real `openai` SDK (and, for
its event stream, a plain SSE client) against a real server of the tiny Kokoro model;
every format decoded back with PyAV; transcriptions by the real Whisper."""

from __future__ import annotations

import base64
import http.client
import io
import json
import socket
import time
from pathlib import Path

import av
import httpx
import numpy as np
import openai
import pytest
from httpx_sse import connect_sse

from tests.server_harness import kokoro_server
from voicecli import protocol as p
from voicecli.audio.encode import AudioFormat
from voicecli.config import Settings
from voicecli.server.openai_api import AudioAPI

pytest.importorskip("uvicorn", reason="voicecli serve needs the server extra")

TEXT = " ".join(
    f"This is sentence number {n} of a reply that a program asked voicecli to speak."
    for n in range(1, 5)
)
# Encoders that prime their first frame and pad their last, which MP3 and AAC streams
# cannot tell a decoder to trim (no header is written back): at most this much more.
PRIMING_SECONDS = {AudioFormat.MP3: 0.12, AudioFormat.AAC: 0.12}


@pytest.fixture(scope="module")
def api(tiny_model_dir):
    settings = Settings(voice="af_tiny", lang="a", model_dir=tiny_model_dir)
    with kokoro_server(tiny_model_dir, "af_tiny", "a", audio_api=AudioAPI.of(settings)) as s:
        yield s


def client(server, key: str = "unused", **options) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.http_url}/v1", api_key=key, **options)


def seconds_of(data: bytes, fmt: AudioFormat) -> float:
    if fmt is AudioFormat.PCM:
        return len(data) / 2 / p.SAMPLE_RATE
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        return sum(frame.samples for frame in container.decode(stream)) / stream.rate


def test_every_format_streams_and_decodes_to_the_length_of_the_pcm(api):
    sdk = client(api)
    heard = {}
    for fmt in AudioFormat:
        began = time.monotonic()
        first = None
        data = bytearray()
        with sdk.audio.speech.with_streaming_response.create(
            model="tts-1", voice="af_tiny", input=TEXT, response_format=fmt.value
        ) as response:
            assert response.headers["content-type"].startswith("audio/")
            for chunk in response.iter_bytes():
                first = first if first is not None else time.monotonic() - began
                data += chunk
        total = time.monotonic() - began
        assert first is not None and first < total / 2, (fmt, first, total)  # it streamed
        heard[fmt] = seconds_of(bytes(data), fmt)
    pcm = heard[AudioFormat.PCM]
    assert pcm > 2.0
    for fmt, seconds in heard.items():
        slack = 0.01 * pcm + PRIMING_SECONDS.get(fmt, 0.0)
        assert abs(seconds - pcm) <= slack, (fmt, seconds, pcm)


def test_a_wav_stream_marks_its_unknown_length_as_wav_streams_do(api):
    data = (
        client(api)
        .audio.speech.create(model="kokoro", voice="af_tiny", input="Hello.", response_format="wav")
        .read()
    )
    assert data[:4] == b"RIFF" and data[4:8] == b"\xff\xff\xff\xff" and data[8:12] == b"WAVE"


def test_sse_gives_the_audio_as_deltas_then_done_with_word_timings_if_asked(api):
    body = {
        "model": "gpt-4o-mini-tts",
        "voice": "af_tiny",
        "input": "Hello there. How are you today?",
        "response_format": "pcm",
        "stream_format": "sse",
        "instructions": "Speak cheerfully.",  # accepted and ignored
        "words": True,
    }
    with httpx.Client(base_url=api.http_url, timeout=60) as http:
        with connect_sse(http, "POST", "/v1/audio/speech", json=body) as source:
            assert source.response.headers["content-type"].startswith("text/event-stream")
            events = [json.loads(event.data) for event in source.iter_sse()]
        streamed = http.post(
            "/v1/audio/speech", json={**body, "stream_format": "audio", "words": False}
        ).content
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done" and kinds.count("speech.audio.done") == 1
    assert set(kinds) == {"speech.audio.delta", "speech.audio.words", "speech.audio.done"}
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if "audio" in e)
    # As many samples either way (Kokoro's noise source makes each render its own).
    assert abs(len(audio) - len(streamed)) <= 2 * 480, (len(audio), len(streamed))
    words = [w for e in events if e["type"] == "speech.audio.words" for w in e["words"]]
    assert [w["word"] for w in words] == ["Hello", "there", "How", "are", "you", "today"]
    starts = [w["start"] for w in words]
    assert starts == sorted(starts) and words[-1]["end"] <= len(audio) / 2 / p.SAMPLE_RATE
    assert events[-1]["usage"]["input_tokens"] == 6


@pytest.mark.parametrize(
    ("fields", "status", "param"),
    [
        ({"voice": "no_such"}, 400, "voice"),
        ({"voice": "../voices/af_tiny"}, 400, "voice"),
        ({"response_format": "ogg"}, 400, "response_format"),
        ({"input": ""}, 400, "input"),
        ({"input": "x" * 4097}, 400, "input"),
        ({"speed": 3.5}, 400, "speed"),
        ({"stream_format": "chunks"}, 400, "stream_format"),
        ({"model": "eleven_monolingual"}, 404, "model"),
    ],
)
def test_a_bad_field_is_an_openai_error_naming_it(api, fields, status, param):
    request = {"model": "tts-1", "voice": "af_tiny", "input": "Hello.", **fields}
    with pytest.raises(openai.APIStatusError) as caught:
        client(api, max_retries=0).audio.speech.create(**request)
    error = caught.value
    assert error.status_code == status
    assert error.body["param"] == param and error.body["message"].endswith(".")
    assert set(error.body) == {"message", "type", "param", "code"}


def test_a_body_that_is_not_json_is_a_clear_error(api):
    answer = httpx.post(f"{api.http_url}/v1/audio/speech", content=b"\xff{", timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "The body is not valid JSON: send a JSON object."


def test_openai_voice_names_are_spoken_with_a_kokoro_voice(api, caplog):
    with caplog.at_level("INFO", logger="voicecli.server.openai_api.catalog"):
        data = (
            client(api)
            .audio.speech.create(model="tts-1", voice="nova", input="Hello.", response_format="pcm")
            .read()
        )
    assert len(data) > 0
    # nova is af_nova, which the tiny model lacks: the configured voice speaks instead.
    assert "af_nova, which this model lacks: using af_tiny" in caplog.text


def test_models_and_voices_are_listed(api):
    sdk = client(api)
    names = {model.id for model in sdk.models.list()}
    assert {"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "kokoro", "whisper-1"} <= names
    # Open WebUI's reading of a speech server that is not OpenAI's.
    voices = httpx.get(f"{api.http_url}/v1/audio/voices", timeout=10).json()["voices"]
    offered = {voice["id"]: voice["name"] for voice in voices}
    assert offered["af_tiny"] == "af_tiny"
    assert offered["nova"] == "nova (af_tiny)"  # the tiny model has no af_nova
    installed = api.server.config.app.state.scheduler.model.voices()
    assert len(offered) == len(voices) == len(installed) + 13
    models = httpx.get(f"{api.http_url}/v1/audio/models", timeout=10).json()["models"]
    assert {model["id"] for model in models} == {"kokoro", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"}


def test_a_client_that_hangs_up_mid_stream_stops_its_synthesis(api):
    """A client with a small receive window, as a slow one has: the server cannot have
    sent the whole reply (minutes of audio) into the sockets' buffers by the time its
    first bytes come, so the hang-up finds the synthesis still going."""
    scheduler = api.server.config.app.state.scheduler
    body = json.dumps(
        {"model": "tts-1", "voice": "af_tiny", "input": " ".join([TEXT] * 12)[:4096],
         "response_format": "pcm"}
    ).encode()  # fmt: skip
    url = httpx.URL(api.http_url)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect((url.host, url.port))
    head = (
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: {url.host}:{url.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    assert scheduler.clients == 1
    sock.close()
    hung_up = time.monotonic()
    while scheduler.clients:
        assert time.monotonic() - hung_up < 1.0, "its synthesis went on"
        time.sleep(0.01)


def test_with_a_key_only_those_who_send_it_are_served(tiny_model_dir):
    settings = Settings(voice="af_tiny", lang="a", model_dir=tiny_model_dir)
    with kokoro_server(
        tiny_model_dir, "af_tiny", "a", audio_api=AudioAPI.of(settings), key="s3cret"
    ) as server:
        with pytest.raises(openai.AuthenticationError) as caught:
            client(server, key="wrong", max_retries=0).models.list()
        assert caught.value.body["code"] == "invalid_api_key"
        data = client(server, key="s3cret").audio.speech.create(
            model="tts-1", voice="af_tiny", input="Hi.", response_format="pcm"
        )
        assert len(data.read()) > 0


def test_a_rebound_page_gets_an_openai_error_before_any_work(api):
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    conn.request("GET", "/v1/models", headers={"Host": f"evil.example:{api.port}"})
    answer = conn.getresponse()
    assert answer.status == 403
    assert json.loads(answer.read())["error"]["code"] == "forbidden"


# --- transcriptions -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def spoken(tmp_path_factory) -> tuple[Path, str]:
    from voicecli.audio.wav import WavWriter
    from voicecli.bench.espeak import Espeak

    said = "Please turn off the lights in the kitchen before you go to bed."
    espeak = Espeak()
    path = tmp_path_factory.mktemp("espeak") / "question.wav"
    writer = WavWriter(path, espeak.sample_rate)
    writer.write(np.concatenate([np.zeros(espeak.sample_rate, np.float32), espeak.speak(said)]))
    writer.close()
    return path, said


def test_a_file_is_transcribed_in_every_response_format(api, spoken):
    from voicecli.bench.wer import wer

    path, said = spoken
    sdk = client(api)
    plain = sdk.audio.transcriptions.create(model="whisper-1", file=path.open("rb"))
    assert wer([said], [plain.text]) <= 0.1, plain.text
    text = sdk.audio.transcriptions.create(
        model="whisper-1", file=path.open("rb"), response_format="text"
    )
    assert text.strip() == plain.text
    verbose = sdk.audio.transcriptions.create(
        model="whisper-1",
        file=path.open("rb"),
        response_format="verbose_json",
        timestamp_granularities=["word", "segment"],
        language="en",
        prompt="Lights and kitchens.",
    )
    assert verbose.language == "en" and 3.0 < verbose.duration < 6.0
    # Timed from the file's start: after its second of silence (less the VAD's padding).
    assert verbose.segments and verbose.segments[0].start >= 0.5
    assert verbose.words and verbose.words[0].start >= 0.5 and len(verbose.words) >= 10
    for fmt, first in (("srt", "1\n00:00:0"), ("vtt", "WEBVTT\n\n00:00:0")):
        captions = sdk.audio.transcriptions.create(
            model="whisper-1", file=path.open("rb"), response_format=fmt
        )
        assert captions.startswith(first) and "kitchen" in captions


@pytest.mark.parametrize(
    ("upload", "fields", "param"),
    [
        (("noise.wav", b"RIFF this is not audio at all" * 20), {}, "file"),
        (None, {}, "file"),
        (("q.wav", None), {"response_format": "xml"}, "response_format"),
        (("q.wav", None), {"timestamp_granularities[]": "word"}, "timestamp_granularities"),
        (("q.wav", None), {"language": "en-GB-oxendict"}, "language"),
    ],
)
def test_a_bad_upload_is_an_openai_error_naming_the_field(api, spoken, upload, fields, param):
    files = None
    if upload is not None:
        name, data = upload
        files = {"file": (name, data if data is not None else spoken[0].read_bytes())}
    answer = httpx.post(
        f"{api.http_url}/v1/audio/transcriptions",
        data={"model": "whisper-1", **fields},
        files=files or {"other": ("x.txt", b"x")},
        timeout=60,
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["param"] == param


def test_an_upload_past_the_limit_is_refused_before_it_is_read(api):
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    conn.putrequest("POST", "/v1/audio/transcriptions")
    conn.putheader("Content-Type", "multipart/form-data; boundary=x")
    conn.putheader("Content-Length", str(26 * 1024 * 1024))
    conn.endheaders()
    conn.send(b"--x\r\n")  # and nothing more: the answer comes at once
    answer = conn.getresponse()
    assert answer.status == 413
    assert json.loads(answer.read())["error"]["code"] == "file_too_large"
