"""`voicecli serve` against hostile and careless clients: every defect found by a run of
them, each with the test that failed before its fix."""

from __future__ import annotations

import copy
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from websockets.exceptions import ConnectionClosed

from tests.server_harness import (
    RECV_TIMEOUT,
    RunningServer,
    StandInModel,
    collect,
    kokoro_server,
    ping_status,
    recv,
    recv_control,
    speak,
    ws_connect,
)
from voicecli import protocol as p
from voicecli.normalize import NO_WORDS
from voicecli.server.requests import Limits
from voicecli.server.run import HeadTimeoutH11
from voicecli.tts.steps import AudioPart, Step, TextStaged


@pytest.fixture(scope="module")
def tiny_server(tiny_model_dir: Path) -> Iterator[RunningServer]:
    with kokoro_server(tiny_model_dir, "ef_tiny", "e") as running:
        yield running


class PacedModel(StandInModel):
    """A stand-in model whose text says how many parts it takes ("7" = 7 parts of
    ``part_seconds`` each); it logs which text each part was for, in order. With
    ``prepare_seconds``, a text-stage pass ("prepare" + text in the log) comes first.
    Every listener has ``ahead_seconds`` queued, and ``limits`` keeps each part's
    limit on decoding."""

    def __init__(self, part_seconds: float = 0.02, prepare_seconds: float = 0.0) -> None:
        self.part_seconds = part_seconds
        self.prepare_seconds = prepare_seconds
        self.ahead_seconds = 0.0
        self.limit: float | None = None
        self.limits: list[float | None] = []
        self.aheads: list[float] = []
        self.log: list[str] = []
        self.closed: list[str] = []  # texts whose synthesis was stopped early
        self.lock = threading.Lock()

    def ahead(self) -> float:
        return self.ahead_seconds

    def speaker(self) -> Any:
        """Each listener's own queue, from ``aheads`` in the order listeners first speak."""
        if not self.aheads:
            return self
        seat = copy.copy(self)
        seat.ahead_seconds = self.aheads.pop(0)
        return seat

    def limit_parts(self, seconds: float | None) -> None:
        self.limit = seconds

    def speak_steps(self, chunks: list[str], cancel: Any = None, voice: Any = None,
                    speed: Any = None) -> Iterator[Step]:  # fmt: skip
        text = chunks[0]
        done = 0
        try:
            if self.prepare_seconds:
                time.sleep(self.prepare_seconds)
                with self.lock:
                    self.log.append("prepare " + text)
                yield TextStaged((), 0)  # text stages: no words to time
            for _ in range(int(text.split()[0].rstrip("."))):
                self.limits.append(self.limit)
                time.sleep(self.part_seconds)
                with self.lock:
                    self.log.append(text)
                done += 1
                yield AudioPart(np.full(2400, 0.1, np.float32))
        finally:
            if done < int(text.split()[0].rstrip(".")):
                self.closed.append(text)


def serve(model: Any, **limits: Any) -> RunningServer:
    running = RunningServer(lambda: model, Limits(**{"listeners": 64, **limits})).start()
    running.wait_ready()
    return running


# --- 1, 2: voices come from the voice set, and their packs are bounded ----------------
@pytest.mark.parametrize(
    "voice", ["/tmp/voicecli-evil/evil", "../../../../tmp/voicecli-evil/evil",
              "../voices/af_tiny", "af_tiny+/tmp/voicecli-evil/evil", "af_tiny.pt", "zz_nobody"],
)  # fmt: skip
def test_a_voice_outside_the_voice_set_is_refused_without_naming_a_path(
    tiny_server: RunningServer, tiny_model_dir: Path, voice: str
) -> None:
    evil = Path("/tmp/voicecli-evil")
    evil.mkdir(exist_ok=True)
    torch.save(torch.zeros(510, 1, 256), evil / "evil.pt")  # it exists: it must not matter
    with ws_connect(tiny_server) as ws:
        ws.send(speak("v", "Sí.", voice=voice))
        frames, error = collect(ws, "v")
    assert not frames and error["code"] == p.BAD_REQUEST
    assert str(tiny_model_dir) not in error["message"]
    assert "does not exist" not in error["message"] and "corrupt" not in error["message"]


def test_voice_packs_are_normalised_and_bounded(tiny_model_dir: Path) -> None:
    from voicecli.tts.kokoro.files import ModelFiles, VoicePacks
    from voicecli.tts.voices import VoiceSpec

    packs = VoicePacks(ModelFiles.resolve(tiny_model_dir), size=4)
    first = packs.get(VoiceSpec.parse("af_tiny"))
    for i in range(200):
        assert packs.get(VoiceSpec.parse(f"af_tiny:1.{i:06d}")) is first  # one blend
    for i in range(1, 50):
        packs.get(VoiceSpec.parse(f"af_tiny:{i}+am_tiny:{50 - i}"))
    assert len(packs._packs) <= 4


# --- 3: no client can starve another ---------------------------------------------------
def test_a_deep_queue_and_a_long_text_share_the_model_in_turns() -> None:
    model = PacedModel()
    running = serve(model)
    try:
        with ws_connect(running) as greedy, ws_connect(running) as healthy:
            for i in range(8):
                greedy.send(speak(f"g{i}", "40."))  # 8 jobs of 40 parts: 320 parts queued
            while not model.log:
                time.sleep(0.01)
            healthy.send(speak("h", "3."))
            frames, done = collect(healthy, "h")
            assert done["type"] == "sentence_done" and len(frames) == 3
            with model.lock:
                before = model.log.index("3.")
            # Healthy's parts came in turns with greedy's, not after its 320 parts.
            assert before < 10, model.log[:20]
    finally:
        running.stop()


def order_of_two(model: PacedModel, warmed: str = "") -> list[str]:
    """The model's log for a's "2 a" and b's "2 b", b's sent while a's text stage runs,
    after a turn of "1" for each client named in ``warmed`` (so that its speaker exists,
    with the audio in hand ``model.aheads`` gives it)."""
    running = serve(model)
    try:
        with ws_connect(running) as a, ws_connect(running) as b:
            for ws, name in ((a, "a"), (b, "b")):
                if name in warmed:
                    ws.send(speak(name + "0", "1 " + name))
                    collect(ws, name + "0")
            with model.lock:
                model.log.clear()
            a.send(speak("a", "2 a"))
            time.sleep(0.1)
            b.send(speak("b", "2 b"))  # while a's text stage runs
            for ws, name in ((a, "a"), (b, "b")):
                frames, done = collect(ws, name)
                assert done["type"] == "sentence_done" and len(frames) == 2
            with model.lock:
                return list(model.log)
    finally:
        running.stop()


def test_a_text_stage_and_the_first_part_after_it_are_separate_turns() -> None:
    # A phrase's text stages take up to 0.6 s on the real weights: run with its first
    # part, they would make anyone who arrives meanwhile wait for both, though a has
    # audio in hand and b has none.
    model = PacedModel(part_seconds=0.05, prepare_seconds=0.3)
    model.aheads = [1.0, 0.0]
    log = order_of_two(model, warmed="a")
    # b, silent and prepared, goes before a, who has audio in hand.
    assert log[:3] == ["prepare 2 a", "prepare 2 b", "2 b"], log


def test_between_two_silent_clients_the_part_after_a_text_stage_goes_first() -> None:
    # Neither has audio: a's part is one pass from a's first sound, b's is a text stage
    # and a part away, and b's first sound comes no later for waiting for a's part.
    # Flooding clients that ask for "Hi." again and again are silent at each request:
    # the part after a healthy client's text stage went behind one of theirs.
    log = order_of_two(PacedModel(part_seconds=0.05, prepare_seconds=0.3))
    assert log[:3] == ["prepare 2 a", "2 a", "prepare 2 b"], log


def test_a_text_stage_is_followed_by_its_part_when_nobody_is_silent() -> None:
    model = PacedModel(part_seconds=0.05, prepare_seconds=0.3)
    model.aheads = [1.0, 0.5]  # both have audio in hand; b less
    log = order_of_two(model, warmed="ab")
    # Least queued alone would have let b in between: b has less queued.
    assert log[:2] == ["prepare 2 a", "2 a"], log


@pytest.mark.parametrize("ahead, short", [(0.0, False), (5.0, True)])
def test_a_lone_client_gets_short_parts_once_it_has_audio_in_hand(
    ahead: float, short: bool
) -> None:
    # Whoever connects next waits for the part in progress: a client with seconds of
    # audio queued loses nothing by short parts, a client about to fall silent would.
    model = PacedModel(part_seconds=0.001)
    model.ahead_seconds = ahead
    running = serve(model)
    try:
        with ws_connect(running) as ws:
            ws.send(speak("x", "5."))
            collect(ws, "x")
        # The first part is the listener's first: nothing is queued for it yet.
        assert model.limits == [None] + [Limits().shared_part_seconds if short else None] * 4
    finally:
        running.stop()


def test_two_full_sessions_do_not_lock_everyone_else_out() -> None:
    running = serve(PacedModel(part_seconds=0.2))
    try:
        with ws_connect(running) as a, ws_connect(running) as b, ws_connect(running) as c:
            for ws, name in ((a, "a"), (b, "b")):
                for i in range(Limits().max_pending_per_session):
                    ws.send(speak(f"{name}{i}", "5."))
            time.sleep(0.5)
            c.send(speak("c", "1."))
            frames, done = collect(c, "c")
            assert done["type"] == "sentence_done", done
    finally:
        running.stop()


def test_a_speak_produces_no_more_audio_than_its_text_can_take_to_say() -> None:
    """A model gone astray (here 10 s for "100.") is cut at the text's budget, 3 s and
    0.6 s per letter or digit, and the client is told it was cut, not failed."""
    running = serve(PacedModel(part_seconds=0.001))
    try:
        with ws_connect(running) as ws:
            ws.send(speak("astray", "100."))  # 100 parts of 0.1 s
            frames, done = collect(ws, "astray")
            assert done["type"] == "sentence_done" and done["truncated"] is True, done
            assert sum(len(f.pcm) // 2 for f in frames) == int(4.8 * p.SAMPLE_RATE)
            ws.send(speak("sane", "3."))
            frames, done = collect(ws, "sane")
            assert "truncated" not in done
            assert sum(len(f.pcm) // 2 for f in frames) == int(0.3 * p.SAMPLE_RATE)
    finally:
        running.stop()


def test_a_speak_produces_at_most_max_request_seconds_of_audio() -> None:
    running = serve(PacedModel(part_seconds=0.001), max_request_seconds=1.0)
    try:
        with ws_connect(running) as ws:
            ws.send(speak("long", "100."))
            frames, done = collect(ws, "long")
            assert done["truncated"] is True
            assert sum(len(f.pcm) // 2 for f in frames) == p.SAMPLE_RATE
    finally:
        running.stop()


@pytest.mark.parametrize("text", [".", "." * 1999, "😀" * 500, "👨‍👩‍👧‍👦" * 250, "?! ?! ..."])
def test_a_text_with_no_words_is_refused_as_the_cli_refuses_it(text: str) -> None:
    running = serve(PacedModel(part_seconds=0.001))
    try:
        with ws_connect(running) as ws:
            ws.send(speak("none", text))
            frames, done = collect(ws, "none")
            assert not frames and done["code"] == p.BAD_REQUEST
            assert done["message"] == NO_WORDS
    finally:
        running.stop()


class ReadingModel(PacedModel):
    """Keeps the texts that reach its text stage, and speaks one part for each."""

    def __init__(self) -> None:
        super().__init__(part_seconds=0.001)
        self.read: list[str] = []

    def phonemes(self, text: str) -> list[str]:
        self.read.append(text)
        return ["1."]


def test_runs_of_marks_and_blob_words_reach_the_model_bounded() -> None:
    model = ReadingModel()
    running = serve(model)
    try:
        with ws_connect(running) as ws:
            ws.send(speak("runs", "Hi" + "!" * 1998))
            assert collect(ws, "runs")[1]["type"] == "sentence_done"
            ws.send(speak("blob", "a" * 2000))
            assert collect(ws, "blob")[1]["type"] == "sentence_done"
        assert model.read == ["Hi!", "a" * 40 + "…"]
    finally:
        running.stop()


# --- 4: a client that hangs up stops its synthesis ------------------------------------
@pytest.mark.parametrize("accept", ["audio/wav", p.STREAM_MEDIA_TYPE])
def test_an_http_client_that_hangs_up_stops_the_synthesis(accept: str) -> None:
    model = PacedModel(part_seconds=0.05)
    running = serve(model)
    try:
        body = json.dumps({"text": "200."}).encode()
        with socket.create_connection(("127.0.0.1", running.port)) as sock:
            sock.sendall(
                b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\n"
                + f"Accept: {accept}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            time.sleep(0.5)
        deadline = time.monotonic() + 10
        while "200." not in model.closed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "200." in model.closed, "the synthesis went on after the client left"
        assert len(model.log) < 100
    finally:
        running.stop()


# --- 5, 7, 8: malformed messages get a typed reply, and the session lives on ---------
@pytest.mark.parametrize(
    "frame, code",
    [
        ("[" * 5000, p.BAD_JSON),
        ('{"type": "cancel", "request_id": [1]}', p.BAD_REQUEST),
        ('{"type": "cancel", "request_id": {"a": 1}}', p.BAD_REQUEST),
        ('{"v": true, "type": "end"}', p.BAD_VERSION),
        (speak("n", "Sí.", voice="ef_tiny:nan+am_tiny"), p.BAD_REQUEST),
        (speak("n", "Sí.", voice="ef_tiny:inf"), p.BAD_REQUEST),
        (json.dumps({"type": "speak", "request_id": "s", "text": "\ud800"}), p.BAD_REQUEST),
        (json.dumps({"type": "speak", "request_id": "\udfff", "text": "Sí."}), p.BAD_REQUEST),
    ],
)
def test_hostile_messages_get_a_typed_error_and_the_session_survives(
    tiny_server: RunningServer, frame: str, code: str
) -> None:
    with ws_connect(tiny_server) as ws:
        ws.send(frame)
        error = recv_control(ws)
        assert error["type"] == "error" and error["code"] == code, error
        ws.send(json.dumps({"type": "end"}))
        assert recv_control(ws) == {"v": 1, "type": "done"}


def test_a_tiny_voice_weight_is_just_a_blend(tiny_server: RunningServer) -> None:
    with ws_connect(tiny_server) as ws:
        ws.send(speak("w", "Sí.", voice="ef_tiny:1e-300+am_tiny"))
        frames, done = collect(ws, "w")
        assert frames and done["type"] == "sentence_done"


def test_the_longest_legal_text_fits_in_a_frame_however_it_is_escaped(
    tiny_server: RunningServer,
) -> None:
    text = "😀" * Limits().max_text_chars
    frame = json.dumps({"type": "speak", "request_id": "e", "text": text})  # ensure_ascii
    assert len(frame) > 20_000
    with ws_connect(tiny_server) as ws:
        ws.send(frame)
        ws.send(json.dumps({"type": "cancel", "request_id": "e"}))
        assert recv_control(ws)["request_id"] == "e"  # an answer, not close code 1009


def test_a_duplicate_id_error_is_not_the_running_requests_final_reply() -> None:
    running = serve(PacedModel(part_seconds=0.05))
    try:
        with ws_connect(running) as ws:
            ws.send(speak("d", "10."))
            ws.send(speak("d", "10."))
            error = recv_control(ws)
            assert error["code"] == p.BAD_REQUEST and error.get("request_id") is None
            frames, done = collect(ws, "d")
            assert done["type"] == "sentence_done" and len(frames) == 10
            ws.send(json.dumps({"type": "end"}))
            assert recv_control(ws) == {"v": 1, "type": "done"}  # no second final reply
    finally:
        running.stop()


# --- 6, 8: HTTP bodies -------------------------------------------------------------------
def response_of(sock: socket.socket) -> str:
    """Everything the server sends until it closes (or pauses for a second)."""
    sock.settimeout(1.0)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data.decode(errors="replace")


def post(server: RunningServer, body: bytes, content_type: str) -> tuple[int, dict | bytes]:
    request = urllib.request.Request(
        server.http_url + "/invocations", data=body, headers={"Content-Type": content_type,
                                                              "Accept": "audio/pcm"})  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=RECV_TIMEOUT) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_a_huge_body_is_refused_before_it_is_read(tiny_server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", tiny_server.port)) as sock:
        sock.sendall(b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Length: 1000000000\r\n"
                     b"Content-Type: application/json\r\n\r\n")  # fmt: skip
        reply = response_of(sock)
    assert reply.startswith("HTTP/1.1 413") and p.TEXT_TOO_LONG in reply
    with socket.create_connection(("127.0.0.1", tiny_server.port)) as sock:  # no length given
        sock.sendall(b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Transfer-Encoding: chunked\r\n"
                     b"Content-Type: application/json\r\n\r\n")  # fmt: skip
        chunk = b"x" * 65536
        try:
            for _ in range(100):  # 6.5 MB, far past the limit
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        except OSError:
            pass  # the server stopped reading and answered
        assert response_of(sock).startswith("HTTP/1.1 413")


def test_nested_json_over_http_is_a_json_error(tiny_server: RunningServer) -> None:
    status, body = post(tiny_server, b"[" * 5000, "application/json")
    assert status == 400 and body["code"] == p.BAD_JSON


def test_a_text_body_that_starts_with_a_brace_is_text(tiny_server: RunningServer) -> None:
    status, pcm = post(tiny_server, "{Sí.}".encode(), "text/plain; charset=utf-8")
    assert status == 200 and len(pcm) > 0


def test_slow_headers_and_slow_bodies_time_out(tiny_model_dir: Path, monkeypatch) -> None:
    monkeypatch.setattr(HeadTimeoutH11, "head_timeout", 0.5)
    running = serve(PacedModel(), body_timeout=0.5)
    try:
        with socket.create_connection(("127.0.0.1", running.port)) as sock:
            sock.settimeout(5)
            started = time.monotonic()
            try:
                for byte in b"POST /invocations HTTP/1.1\r\nHost:":
                    sock.sendall(bytes([byte]))
                    time.sleep(0.05)
                assert sock.recv(100) == b""  # closed by the server
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert time.monotonic() - started < 4
        with socket.create_connection(("127.0.0.1", running.port)) as sock:
            sock.settimeout(5)
            sock.sendall(b"POST /invocations HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n"
                         b"Content-Type: application/json\r\n\r\n{")  # fmt: skip
            reply = response_of(sock)
            assert reply.startswith("HTTP/1.1 400") and "did not arrive" in reply
    finally:
        running.stop()


def test_a_text_frame_that_is_not_utf8_is_closed_with_1007_and_one_line_of_log(
    tiny_server: RunningServer, caplog
) -> None:
    import base64
    import os

    with socket.create_connection(("127.0.0.1", tiny_server.port)) as sock:
        key = base64.b64encode(os.urandom(16)).decode()
        sock.sendall(
            f"GET {p.WS_PATH} HTTP/1.1\r\nHost: 127.0.0.1:{tiny_server.port}\r\n"
            f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        assert response_of(sock).startswith("HTTP/1.1 101")
        payload, mask = b"\xff\xfe{", os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        with caplog.at_level(logging.INFO, logger="uvicorn.error"):
            sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + masked)
            close = sock.recv(4)
    assert close[0] == 0x88 and int.from_bytes(close[2:4], "big") == 1007
    records = [r for r in caplog.records if "Invalid UTF-8" in r.getMessage()]
    assert len(records) == 1 and records[0].exc_info is None and not records[0].exc_text


def test_the_server_is_still_healthy_after_all_this(tiny_server: RunningServer) -> None:
    assert ping_status(tiny_server) == 200
    with ws_connect(tiny_server) as ws:
        ws.send(speak("ok", "Sí."))
        frames, done = collect(ws, "ok")
        assert frames and done["type"] == "sentence_done"


def _stuck_client(running: RunningServer) -> Any:
    """A WebSocket client that reads nothing once connected, with a small receive buffer
    of its own so that what piles up is the server's."""
    from websockets.sync.client import connect

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    sock.connect(("127.0.0.1", running.port))
    return connect(running.ws_url + "/invocations-bidirectional-stream", sock=sock,
                   max_size=None, max_queue=1, proxy=None, close_timeout=0.2)  # fmt: skip


def test_a_client_that_stops_reading_is_ended_and_the_others_carry_on() -> None:
    model = PacedModel(part_seconds=0.001)
    running = serve(model, send_queue_frames=4, frame_samples=2400, stall_timeout=0.5)
    try:
        with _stuck_client(running) as stuck, ws_connect(running) as healthy:
            stuck.send(speak("s", "100000."))
            time.sleep(2.0)
            healthy.send(speak("h", "3."))
            frames, done = collect(healthy, "h")
            assert done["type"] == "sentence_done" and len(frames) == 3
            with pytest.raises(ConnectionClosed):
                while True:
                    recv(stuck)
            assert "100000." in model.closed  # its synthesis stopped too
    finally:
        running.stop()


def test_a_client_that_stops_reading_stops_costing_synthesis_at_once() -> None:
    # Without a fixed send buffer Linux lets megabytes (minutes of audio) pile up in the
    # kernel for such a client, and the model goes on working for it all that time.
    model = PacedModel(part_seconds=0.001)  # 1000 parts (100 ms of audio each) a second
    running = serve(model)
    try:
        with _stuck_client(running) as stuck:
            stuck.send(speak("s", "100000."))
            time.sleep(1.5)
            settled = len(model.log)
            time.sleep(0.5)
            assert len(model.log) == settled  # it waits for the client, and costs nothing
            # the outbox (32 frames), the socket's 64 KiB and the client's own buffers
            assert settled < 150
    finally:
        running.stop()


def test_a_client_with_unread_audio_waits_behind_one_that_reads() -> None:
    model = PacedModel(part_seconds=0.005)
    # Its outbox never fills in this test, and the stand-in takes 0.1 s per part, not
    # Kokoro's time for "100000.".
    running = serve(model, send_queue_frames=10_000, seconds_per_char=1000.0)
    try:
        with _stuck_client(running) as stuck, ws_connect(running) as healthy:
            stuck.send(speak("s", "100000."))
            time.sleep(1.0)  # its socket is full: its audio now waits in the outbox
            healthy.send(speak("h", "50."))
            frames, done = collect(healthy, "h")
            assert done["type"] == "sentence_done" and len(frames) == 50
            with model.lock:
                log = list(model.log)
            first, last = log.index("50."), len(log) - 1 - log[::-1].index("50.")
            # Taking turns would have given the stuck client one part in two.
            assert log[first : last + 1].count("100000.") <= 2
    finally:
        running.stop()


def test_a_client_that_stops_reading_keeps_no_place_from_one_that_reads() -> None:
    """The only place, taken by a client that then reads nothing: past the grace it
    needs no model time, and the next listener is served, not told the server is busy."""
    model = PacedModel(part_seconds=0.001)
    running = serve(
        model, listeners=1, listener_grace=0.3, stall_timeout=30.0, seconds_per_char=1000.0
    )
    try:
        with _stuck_client(running) as stuck, ws_connect(running) as healthy:
            stuck.send(speak("s", "100000."))
            time.sleep(1.5)  # its socket and outbox are full, and it has taken nothing since
            healthy.send(speak("h", "3."))
            frames, done = collect(healthy, "h")
            assert done["type"] == "sentence_done" and len(frames) == 3
    finally:
        running.stop()


def test_a_flood_of_messages_is_read_at_its_rate_and_others_are_answered_at_once() -> None:
    """Messages are read at a bounded rate per connection and per address, however many
    connections a flood comes on, and a refused one costs ``refusal_cost`` of it; another
    address's client is answered as soon as ever."""
    running = serve(
        PacedModel(part_seconds=0.001),
        messages_per_second=200.0,
        message_burst=20,
        address_messages_per_second=300.0,
        refusal_cost=4.0,
    )
    bad = json.dumps({"v": 1, "type": "nonsense"})
    try:
        flood = [ws_connect(running, source="127.0.0.2") for _ in range(3)]
        began = time.monotonic()

        def send_all(ws: Any) -> None:
            for _ in range(100):
                ws.send(bad)

        senders = [threading.Thread(target=send_all, args=(ws,)) for ws in flood]
        for sender in senders:
            sender.start()
        time.sleep(0.3)
        with ws_connect(running) as healthy:
            asked = time.monotonic()
            healthy.send(speak("h", "1."))
            frames, done = collect(healthy, "h")
            assert done["type"] == "sentence_done" and time.monotonic() - asked < 0.5
        for ws in flood:
            assert all(recv_control(ws)["code"] == p.UNKNOWN_TYPE for _ in range(100))
        # 300 refused messages of one address, 1200 messages' worth at 300 a second, after
        # a burst of 20.
        assert time.monotonic() - began >= (300 * 4 - 20) / 300 * 0.9
        for sender in senders:
            sender.join()
        for ws in flood:
            ws.close()
    finally:
        running.stop()
