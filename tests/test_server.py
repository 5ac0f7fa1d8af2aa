"""The real container app under uvicorn on 127.0.0.1, driven by a real WebSocket client.

The model is the random-weight tiny Kokoro (tests/tinymodel.py), so audio is noise
but every code path is Kokoro's. Timing checks are about order, never speed.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.server_harness import (
    RECV_TIMEOUT,
    WS,
    RunningServer,
    StandInModel,
    collect,
    ping,
    ping_status,
    recv,
    recv_control,
    speak,
    ws_connect,
)
from voicecli import protocol as p
from voicecli.cancel import CancelToken
from voicecli.config import Settings
from voicecli.server.outbox import Outbox
from voicecli.server.requests import Limits, split_sentences
from voicecli.server.run import kokoro_factory
from voicecli.tts.kokoro import files as kokoro_files
from voicecli.tts.steps import AudioPart

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    """One tiny-model server; its model loads only once the test opens ``gate``."""
    gate = threading.Event()
    load = kokoro_factory(Settings(voice="ef_tiny", lang="e", model_dir=tiny_model_dir))

    def slow_factory():  # noqa: ANN202
        gate.wait(60)
        return load()

    running = RunningServer(slow_factory).start()
    running.gate = gate  # type: ignore[attr-defined]
    yield running
    running.stop()


@pytest.fixture()
def ready(server: RunningServer) -> RunningServer:
    server.gate.set()  # type: ignore[attr-defined]
    server.wait_ready()
    return server


def test_ping_is_unhealthy_until_the_model_has_loaded(server: RunningServer) -> None:
    assert ping_status(server) == 503
    server.gate.set()  # type: ignore[attr-defined]
    server.wait_ready()
    assert ping_status(server) == 200


def test_first_audio_arrives_before_the_last_sentence_is_sent(ready: RunningServer) -> None:
    with ws_connect(ready) as ws:
        ws.send(speak("s0", "Sí."))
        first = recv(ws)  # nothing else has been sent yet: no waiting for `end`
        assert isinstance(first, p.AudioFrame) and (first.request_id, first.seq) == ("s0", 0)
        ws.send(speak("s1", "No."))  # the last sentence, sent while s0 is still streaming
        ws.send(json.dumps({"type": "end"}))
        frames, done0 = collect(ws, "s0")
        assert done0["type"] == "sentence_done" and not done0["cancelled"]
        assert done0["frames"] == len(frames) + 1
        assert [f.seq for f in frames] == list(range(1, len(frames) + 1))
        assert done0["samples"] == sum(len(f.pcm) // 2 for f in [first, *frames])
        frames1, done1 = collect(ws, "s1")
        assert frames1 and done1["type"] == "sentence_done"
        assert recv(ws) == {"v": 1, "type": "done"}
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=RECV_TIMEOUT)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1000


def test_a_multi_sentence_speak_streams_sentence_by_sentence(ready: RunningServer) -> None:
    assert split_sentences("Sí. ¿No?\nVale!  Bien") == ["Sí.", "¿No?", "Vale!", "Bien"]
    with ws_connect(ready) as ws:
        ws.send(speak("m", "Sí. No.", voice="am_tiny", speed=1.2))
        frames, done = collect(ws, "m")
        assert done["type"] == "sentence_done" and done["frames"] == len(frames)
        audio = np.concatenate([f.samples() for f in frames])
        assert audio.dtype == np.float32 and np.isfinite(audio).all()


def test_cancel_mid_request_stops_within_a_chunk(ready: RunningServer) -> None:
    long_text = " ".join(["Sí."] * 6)
    with ws_connect(ready) as ws:
        ws.send(speak("c", long_text))
        first = recv(ws)
        assert isinstance(first, p.AudioFrame)
        ws.send(json.dumps({"type": "cancel", "request_id": "c"}))
        later, done = collect(ws, "c")
        assert done == {
            "v": 1,
            "type": "sentence_done",
            "request_id": "c",
            "frames": 0,
            "samples": 0,
            "cancelled": True,
        }
        # Frames already on the wire may still arrive, but far less than six sentences.
        assert len(later) < 3 * 5
        ws.send(json.dumps({"type": "cancel", "request_id": "c"}))  # late cancel: harmless
        ws.send(speak("after", "No."))
        frames, done = collect(ws, "after")
        assert frames and done["type"] == "sentence_done" and not done["cancelled"]


def test_concurrent_sessions_and_an_abrupt_disconnect(ready: RunningServer) -> None:
    rude = ws_connect(ready)
    rude.send(speak("x", " ".join(["No."] * 4)))
    a, b = ws_connect(ready), ws_connect(ready)
    results: dict[str, tuple[list[p.AudioFrame], dict]] = {}

    def run(name: str, ws: ClientConnection) -> None:
        ws.send(speak(name, "Sí."))
        results[name] = collect(ws, name)
        ws.send(json.dumps({"type": "end"}))
        assert recv(ws)["type"] == "done"

    threads = [threading.Thread(target=run, args=(n, ws)) for n, ws in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    rude.socket.shutdown(socket.SHUT_RDWR)  # no close handshake: the peer just vanishes
    rude.socket.close()
    for t in threads:
        t.join(RECV_TIMEOUT)
    a.close()
    b.close()
    for name in ("a", "b"):
        frames, done = results[name]
        assert frames and done["type"] == "sentence_done" and not done["cancelled"]
    assert ping_status(ready) == 200


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{not json", p.BAD_JSON),
        ("[1, 2]", p.BAD_JSON),
        (b"\x00\x01garbage\xff", p.BAD_FRAME),
        (b"\xff\xfe{", p.BAD_FRAME),
        (b'{"type": "speak", "text": "\xff"}', p.BAD_JSON),
        (p.MAGIC + bytes([p.VERSION, p.KIND_AUDIO]) + b"xx", p.BAD_FRAME),
        (json.dumps({"type": "sing"}), p.UNKNOWN_TYPE),
        (json.dumps({"text": "Sí."}), p.BAD_REQUEST),
        (json.dumps({"v": 99, "type": "speak"}), p.BAD_VERSION),
        (json.dumps({"type": "speak", "text": "Sí."}), p.BAD_REQUEST),
        (speak("r", "   "), p.BAD_REQUEST),
        (speak("r", "Sí.", speed=9), p.BAD_REQUEST),
        (speak("r", "Sí.", speed=True), p.BAD_REQUEST),
        (speak("r", "Sí.", voice=""), p.BAD_REQUEST),
        (speak("r" * 65, "Sí."), p.BAD_REQUEST),
        (speak("r", "a" * 2001), p.TEXT_TOO_LONG),
    ],
)
def test_malformed_messages_get_an_error_and_the_session_survives(
    ready: RunningServer, frame: str | bytes, code: str
) -> None:
    with ws_connect(ready) as ws:
        ws.send(frame)
        error = recv_control(ws)
        assert error["type"] == "error" and error["code"] == code, error
        assert error["message"]
        ws.send(json.dumps({"type": "end"}))  # still alive and still following the protocol
        assert recv_control(ws) == {"v": 1, "type": "done"}


def test_control_json_in_a_binary_frame_is_understood(ready: RunningServer) -> None:
    with ws_connect(ready) as ws:
        ws.send(json.dumps({"type": "cancel"}).encode())  # SageMaker's default BINARY parts
        ws.send(p.encode_control_frame({"v": 1, "type": "end"}))
        assert recv_control(ws) == {"v": 1, "type": "done"}


def test_unknown_voice_is_a_request_error(ready: RunningServer) -> None:
    with ws_connect(ready) as ws:
        ws.send(speak("v", "Sí.", voice="zz_nobody"))
        frames, error = collect(ws, "v")
        assert not frames and error["code"] == p.BAD_REQUEST and "zz_nobody" in error["message"]


def test_an_oversized_frame_is_closed_cleanly(ready: RunningServer) -> None:
    with ws_connect(ready) as ws:
        ws.send("x" * (Limits().max_message_bytes + 1))
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=RECV_TIMEOUT)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
    assert ping_status(ready) == 200


def test_session_limit_answers_overloaded_not_a_hang(ready: RunningServer) -> None:
    limit = Limits().max_pending_per_session
    with ws_connect(ready) as ws:
        for i in range(limit + 1):
            ws.send(speak(f"q{i}", "Sí."))
        ws.send(json.dumps({"type": "cancel"}))
        replies = {}
        while len(replies) < limit + 1:
            message = recv_control(ws)
            replies[message["request_id"]] = message
        assert replies[f"q{limit}"]["code"] == p.OVERLOADED
        assert all(replies[f"q{i}"]["type"] == "sentence_done" for i in range(limit))


def test_invocations_answer_wav_pcm_and_the_framed_stream(ready: RunningServer) -> None:
    def post(body: bytes, content_type: str, accept: str) -> tuple[int, str, bytes]:
        request = urllib.request.Request(
            ready.http_url + "/invocations",
            data=body,
            headers={"Content-Type": content_type, "Accept": accept},
        )
        try:
            with urllib.request.urlopen(request, timeout=RECV_TIMEOUT) as response:
                return response.status, response.headers["Content-Type"], response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers["Content-Type"], exc.read()

    status, kind, wav = post(json.dumps({"text": "Sí."}).encode(), "application/json", "audio/wav")
    assert (status, kind, wav[:4]) == (200, "audio/wav", b"RIFF")
    status, kind, pcm = post(b"No.", "text/plain", "audio/pcm")
    assert status == 200 and kind.startswith("audio/pcm") and len(pcm) % 2 == 0 and pcm
    status, kind, body = post(
        json.dumps({"text": "Sí.", "request_id": "h"}).encode(),
        "application/json",
        p.STREAM_MEDIA_TYPE,
    )
    assert status == 200 and kind == p.STREAM_MEDIA_TYPE
    reassembler = p.StreamReassembler()
    messages = [p.decode_server_frame(f) for f in reassembler.feed(body)]
    assert reassembler.pending == 0
    assert all(isinstance(m, p.AudioFrame) and m.request_id == "h" for m in messages[:-1])
    assert messages[-1]["type"] == "sentence_done" and messages[-1]["request_id"] == "h"
    status, _, body = post(b"{oops", "application/json", "audio/wav")
    assert status == 400 and json.loads(body)["code"] == p.BAD_JSON
    status, _, body = post(json.dumps({"text": "a" * 5000}).encode(), "application/json", "")
    assert status == 413 and json.loads(body)["code"] == p.TEXT_TOO_LONG


class GatedModel(StandInModel):
    """A stand-in model that synthesizes only when allowed: makes queue states exact."""

    chunks = 100
    chunk_samples = 96_000  # 192 KB frames: 19 MB per job, far more than socket buffers hold

    def __init__(self) -> None:
        # Noise, not silence: a transport that compresses must not hide the backlog.
        self.noise = (
            np.random.default_rng(0).uniform(-0.5, 0.5, self.chunk_samples).astype(np.float32)
        )
        self.release = threading.Event()
        self.started = threading.Event()

    def speak_steps(
        self,
        chunks: list[str],
        cancel: CancelToken | None = None,
        voice: str | None = None,
        speed: float | None = None,
    ) -> Iterator[AudioPart]:
        self.started.set()
        self.release.wait(RECV_TIMEOUT)
        for _ in range(self.chunks):
            yield AudioPart(self.noise)


def test_a_server_at_capacity_tells_the_next_listener_it_is_busy_and_a_stalled_one_is_ended() -> (
    None
):
    model = GatedModel()
    limits = Limits(
        max_listeners=1,
        send_queue_frames=4,
        frame_samples=GatedModel.chunk_samples,
        stall_timeout=1.0,
        max_request_seconds=1000.0,  # a job is 400 s of noise...
        seconds_per_char=1000.0,  # ...for a text of a few characters
    )
    running = RunningServer(lambda: model, limits).start()
    try:
        running.wait_ready()
        # A fixed small receive buffer: Linux would otherwise grow it to tens of MB.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.connect(("127.0.0.1", running.port))
        busy = connect(running.ws_url + WS, sock=sock, max_size=None, max_queue=1, proxy=None)
        with busy, ws_connect(running) as other:
            busy.send(speak("j0", "a"))
            assert model.started.wait(RECV_TIMEOUT)
            busy.send(speak("j1", "a"))  # its own share: it is the listener spoken for
            other.send(speak("k0", "a"))  # a second listener: over what it can serve
            error = recv_control(other)
            assert error["code"] == p.BUSY and error["request_id"] == "k0"
            assert "it speaks for 1 listeners" in error["message"]
            model.release.set()
            # `busy` reads nothing: its audio stops at the outbox's bound, and after 1 s
            # the server ends it, rather than buffering the whole job or holding the model.
            time.sleep(limits.stall_timeout * 2.5)
            other.send(speak("k1", "a"))  # the model is free for others again
            frames, done = collect(other, "k1")
            assert done["type"] == "sentence_done" and len(frames) == GatedModel.chunks, done
            messages = []
            with pytest.raises(ConnectionClosed) as closed:
                while True:
                    messages.append(recv(busy))
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
            audio_j0 = [m for m in messages if isinstance(m, p.AudioFrame) and m.request_id == "j0"]
            assert len(audio_j0) < GatedModel.chunks
            errors = [m for m in messages if isinstance(m, dict)]
            assert [m.get("code") for m in errors] == [p.SLOW_CONSUMER]
    finally:
        running.stop()


def test_outbox_bounds_audio_but_not_control() -> None:
    import asyncio

    from voicecli.server.outbox import OutAudio
    from voicecli.server.scheduler import Job

    async def scenario() -> None:
        outbox = Outbox(Limits(send_queue_frames=2), asyncio.get_running_loop())
        job = Job("r", "t", None, None, outbox)
        outbox.put_audio("r", [b"1"])
        assert outbox.has_room
        outbox.put_audio("r", [b"2"])
        assert not outbox.has_room  # full: the engine adds no more for this client
        job.cancel_now()  # cancel drops queued audio and replies at once
        assert outbox.has_room
        item = await outbox.get()
        assert not isinstance(item, OutAudio) and item["cancelled"] is True

    asyncio.run(scenario())


def test_dockerfile_pins_the_model_revision_and_declares_bidirectional_streaming() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    assert "com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true" in dockerfile
    assert re.search(rf"KOKORO_REVISION={kokoro_files.REVISION}\b", dockerfile)
    assert "EXPOSE 8080" in dockerfile
    assert "download.pytorch.org/whl/cpu" in dockerfile


class WarmingModel(StandInModel):
    """Notes when it is warmed up and when it speaks."""

    def __init__(self, steps: int = 1, seconds: float = 0.0) -> None:
        self.events: list[str] = []
        self.steps, self.seconds = steps, seconds

    def warm_up_steps(self) -> Iterator[None]:
        for _ in range(self.steps):
            time.sleep(self.seconds)  # a forward pass
            self.events.append("warm")
            yield

    def speak_steps(
        self,
        chunks: list[str],
        cancel: CancelToken | None = None,
        voice: str | None = None,
        speed: float | None = None,
    ) -> Iterator[AudioPart]:
        self.events.append("speak")
        yield AudioPart(np.zeros(2400, np.float32))


def test_the_model_is_warmed_up_once_when_idle_never_before_a_waiting_client() -> None:
    model = WarmingModel()
    running = RunningServer(lambda: model, Limits(warm_after=2.0)).start()
    try:
        running.wait_ready()
        engine = running.server.config.app.state.scheduler
        with ws_connect(running) as ws:
            ws.send(speak("first", "Hello."))  # the client that waited for the load
            assert collect(ws, "first")[1]["type"] == "sentence_done"
            assert engine.warm.wait(RECV_TIMEOUT)
            ws.send(speak("later", "Hello."))
            assert collect(ws, "later")[1]["type"] == "sentence_done"
            time.sleep(1.0)  # idle again: no second warm-up
        assert model.events == ["speak", "warm", "speak"]
    finally:
        running.stop()


def test_a_client_that_comes_during_the_warm_up_waits_for_one_of_its_passes_only() -> None:
    model = WarmingModel(steps=20, seconds=0.2)  # 4 s of warming up
    running = RunningServer(lambda: model, Limits(warm_after=0.1)).start()
    try:
        running.wait_ready()
        deadline = time.monotonic() + RECV_TIMEOUT
        while "warm" not in model.events:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert ping(running) == {"status": "ready", "warm": False}
        with ws_connect(running) as ws:
            began = time.monotonic()
            ws.send(speak("now", "Hello."))
            assert collect(ws, "now")[1]["type"] == "sentence_done"
            assert time.monotonic() - began < 2.0, model.events
        assert model.events.index("speak") < 10, model.events  # served mid-warm-up
        assert running.server.config.app.state.scheduler.warm.wait(RECV_TIMEOUT)
        assert model.events.count("warm") == 20  # and the warm-up went on after it
        assert ping(running) == {"status": "ready", "warm": True}
    finally:
        running.stop()


# --- admission: a share each, and as many listeners as it serves in real time ---------------
class HeldModel(StandInModel):
    """Speaks a tenth of a second for each text once ``release`` is set; ``begun`` once
    a text is in it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.begun = threading.Event()

    def speak_steps(self, chunks, cancel=None, voice=None, speed=None):  # noqa: ANN001, ANN201
        self.begun.set()
        self.release.wait(RECV_TIMEOUT)
        yield AudioPart(np.full(2400, 0.1, np.float32))


def first_reply(sockets: list[ClientConnection]) -> tuple[int, dict]:
    """Which of ``sockets`` gets a control message first, and that message."""
    deadline = time.monotonic() + RECV_TIMEOUT
    while time.monotonic() < deadline:
        for n, ws in enumerate(sockets):
            with contextlib.suppress(TimeoutError):
                message = p.decode_server_frame(ws.recv(timeout=0.05))
                assert isinstance(message, dict), message  # nothing is spoken yet
                return n, message
    raise AssertionError("no reply")


def held_server(**limits: object) -> tuple[RunningServer, HeldModel]:
    model = HeldModel()
    running = RunningServer(lambda: model, Limits(**limits)).start()
    running.wait_ready()
    return running, model


def test_a_client_that_fills_its_share_leaves_the_others_theirs() -> None:
    """Twenty connections with every request of their share unanswered, and one more
    each: theirs are refused as overloaded, and a healthy client still is served."""
    running, model = held_server(listeners=64)
    share = Limits().max_pending_per_session
    try:
        flood = [ws_connect(running) for _ in range(20)]
        for n, ws in enumerate(flood):
            for k in range(share + 1):
                ws.send(speak(f"f{n}-{k}", "Spam."))
        for ws in flood:  # each one's last request, over its own share
            assert recv_control(ws)["code"] == p.OVERLOADED
        with ws_connect(running) as healthy:
            healthy.send(speak("h0", "Hello."))
            model.release.set()
            frames, done = collect(healthy, "h0")
            assert done["type"] == "sentence_done" and frames
        for ws in flood:
            ws.close()
    finally:
        running.stop()


def test_past_what_it_serves_in_real_time_the_next_listener_is_told_at_once() -> None:
    running, model = held_server(listeners=3)
    try:
        clients = [ws_connect(running) for _ in range(5)]
        for n, ws in enumerate(clients):
            ws.send(speak(f"c{n}", "Hello there."))
        began = time.monotonic()
        for ws in clients[3:]:
            error = recv_control(ws)
            assert error["code"] == p.BUSY and "it speaks for 3 listeners" in error["message"]
        assert time.monotonic() - began < 2  # at once, not after the others' turns
        model.release.set()
        for n, ws in enumerate(clients[:3]):
            frames, done = collect(ws, f"c{n}")
            assert done["type"] == "sentence_done" and frames
        for ws in clients[:3]:
            ws.close()
        time.sleep(0.5)  # their places free once they have gone
        clients[3].send(speak("again", "Hello there."))
        frames, done = collect(clients[3], "again")
        assert done["type"] == "sentence_done" and frames
        for ws in clients[3:]:
            ws.close()
    finally:
        running.stop()


def test_a_flood_from_one_address_cannot_lock_another_out() -> None:
    """Every place taken by clients of another address: a listener from this one gets one
    of theirs (their waiting requests are refused as busy), at once."""
    running, model = held_server(listeners=2)
    try:
        flood = [ws_connect(running, source="127.0.0.2") for _ in range(6)]
        for n, ws in enumerate(flood):
            ws.send(speak(f"f{n}", "Spam, spam."))
            ws.send(speak(f"g{n}", "More spam."))
        refused = sum(recv_control(ws)["code"] == p.BUSY for ws in flood[2:])
        assert refused == 4
        with ws_connect(running) as healthy:
            healthy.send(speak("h0", "Hello."))
            # The model holds every job, so the first reply can only be the refusal of
            # the jobs of the one that gave way, which it waits for before any speaks.
            gave_way, first = first_reply(flood[:2])
            assert first["code"] == p.BUSY, first
            model.release.set()
            frames, done = collect(healthy, "h0")
            assert done["type"] == "sentence_done" and frames
        # Its job already in the model, if any, ends; the other's both do.
        second = recv_control(flood[gave_way])
        assert second.get("code", p.BUSY) == p.BUSY and second["type"] in ("error", "sentence_done")
        kept = flood[1 - gave_way]
        assert [recv_control(kept)["type"] for _ in "fg"] == ["sentence_done"] * 2
        for ws in flood:
            ws.close()
    finally:
        running.stop()


def test_the_only_place_held_by_a_flood_goes_to_one_from_elsewhere_and_stays() -> None:
    """A server that speaks for one listener: a flood from one address holding it gives
    it up to a client from another, and cannot take it back while that one speaks;
    two clients of one connection each keep it in the order they came."""
    running, model = held_server(listeners=1)
    try:
        flood = [ws_connect(running, source="127.0.0.2") for _ in range(4)]
        flood[0].send(speak("f0", "Spam."))
        flood[0].send(speak("g0", "Spam."))
        assert model.begun.wait(RECV_TIMEOUT)  # f0 is in the model, and so is not given up
        for n, ws in enumerate(flood[1:], 1):
            ws.send(speak(f"f{n}", "Spam."))
            assert recv_control(ws)["code"] == p.BUSY
        healthy = ws_connect(running)
        healthy.send(speak("h0", "Hello."))
        healthy.send(speak("h1", "Hello again."))
        assert recv_control(flood[0])["code"] == p.BUSY  # g0: its place went to the healthy
        for ws in flood:
            ws.send(speak("back", "Spam."))
            assert recv_control(ws)["code"] == p.BUSY
        # One client from a third address finds the place held by one: it waits its turn.
        other = ws_connect(running, source="127.0.0.3")
        other.send(speak("o0", "Hi."))
        assert recv_control(other)["code"] == p.BUSY
        model.release.set()
        assert recv_control(flood[0])["request_id"] == "f0"  # in the model: it ends
        heard: dict[str, int] = {}
        ends = {}
        while len(ends) < 2:
            match recv(healthy):
                case p.AudioFrame(request_id=rid):
                    heard[rid] = heard.get(rid, 0) + 1
                case {"request_id": rid, "type": kind}:
                    ends[rid] = kind
        assert ends == {"h0": "sentence_done", "h1": "sentence_done"} and len(heard) == 2
        for ws in (*flood, healthy, other):
            ws.close()
    finally:
        running.stop()
