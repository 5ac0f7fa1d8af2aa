"""voicecli web: the page in a real headless Chromium (Debian's, through Playwright),
playing through a real AudioWorklet into a PulseAudio null sink of its own; the server
in-process on the tiny model with the scripted LLM behind the real OpenAI client; raw
WebSockets for what a browser would never send."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from voicecli import protocol as p
from voicecli.bench.acknowledgments import first_substantive, is_acknowledgment
from voicecli.bench.browser import trial_figures
from voicecli.bench.scripted_llm import Script, ScriptedLLM
from voicecli.config import Settings
from voicecli.llm.openai_chat import OpenAIChat
from voicecli.server.run import bind
from voicecli.web import messages as m
from voicecli.web import page_server
from voicecli.web.page_server import WebApp, is_loopback, web_server

REPLY = (
    "Sure, here it is. The first sentence of the answer is rather long, so that it takes "
    "a while to say. The second sentence follows it. And a third one ends the reply."
)
LONG_REPLY = " ".join(
    f"Sentence number {i} of a reply that goes on for a while." for i in range(30)
)


@dataclass
class Web:
    url: str
    llm: ScriptedLLM
    app: WebApp

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "ws"


@contextmanager
def serving(
    tiny_synth, tiny_model_dir, reply: str, *, token: str | None = None, stall: float = 30.0,
    tokens_per_second: float = 200.0, ahead: float = 10.0,
) -> Iterator[Web]:  # fmt: skip
    settings = Settings(
        voice="af_tiny", model_dir=tiny_model_dir, engine=False, max_audio_ahead=ahead
    )
    with ScriptedLLM(Script.from_text(reply, tokens_per_second)) as llm:
        client = OpenAIChat(base_url=llm.base_url, api_key="test", model="scripted")
        app = WebApp(settings, tiny_synth, client, token, stall_timeout=stall)
        server = web_server(app)
        sock = bind("127.0.0.1", 0)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
            time.sleep(0.01)
        try:
            yield Web(f"http://127.0.0.1:{sock.getsockname()[1]}/", llm, app)
        finally:
            server.should_exit = True
            thread.join(10)


# --- the page in a real browser -------------------------------------------------------
@pytest.fixture
def speakers(tmp_path):
    """A null sink of this test's own for Chromium, recorded from its monitor."""
    from voicecli.bench.room import VirtualRoom

    room = VirtualRoom()
    recording = tmp_path / "speakers.f32"
    try:
        yield room, recording
    finally:
        room.close()


@contextmanager
def recorded(room, path: Path) -> Iterator[None]:
    rec = subprocess.Popen(
        ["parec", f"--device={room.speakers}.monitor", "--format=float32le", "--rate=24000",
         "--channels=1", "--latency-msec=20", str(path)],
    )  # fmt: skip
    try:
        time.sleep(0.3)  # the recording stream is up before anything plays
        yield
    finally:
        rec.terminate()
        rec.wait()


@pytest.fixture
def browser(speakers):
    from voicecli.bench.browser import chromium
    from voicecli.errors import VoiceCliError

    room, _ = speakers
    try:
        with chromium(env=room.env) as b:
            yield b
    except VoiceCliError as exc:
        if os.environ.get("VOICECLI_REQUIRE_BROWSER") == "1":  # CI: never skipped there
            raise
        pytest.skip(str(exc))


def ask(page, text: str = "question", buffered: bool = False) -> dict:
    return page.evaluate("([q, b]) => voicecli.ask(q, {buffered: b})", [text, buffered])


def open_page(browser, url: str):
    page = browser.new_page()
    page.goto(url)
    page.wait_for_function("voicecli.state.ws.readyState === WebSocket.OPEN")
    return page


def test_the_page_plays_the_reply_as_it_streams_and_shows_the_word_heard(
    tiny_synth, tiny_model_dir, browser, speakers
):
    room, recording = speakers
    with serving(tiny_synth, tiny_model_dir, REPLY, tokens_per_second=50) as web:
        page = open_page(browser, web.url)
        with recorded(room, recording):
            page.evaluate(
                "window.marks = []; new MutationObserver(() => "
                "document.querySelector('#speaking mark') && marks.push(1))"
                ".observe(document.getElementById('speaking'), {childList: true})"
            )
            record = ask(page)
            time.sleep(0.3)
        t = record["t"]
        assert not record["interrupted"] and record["error"] is None
        # Each stage on the page's clock, in pipeline order.
        assert t["sent"] < t["first_text"] < t["first_frame"] <= t["first_handed"]
        assert t["first_handed"] < t["first_audible"] < t["end"]
        assert [record["sentences"][k] for k in sorted(record["sentences"], key=int)][0] == "Sure,"
        assert set(record["audible"]) == set(record["sentences"]) == set(record["samples"])
        # Each sentence's first sample on the audio clock too, in order: what the bench's
        # gaps are measured on.
        frames = [record["frames"][k] for k in sorted(record["frames"], key=int)]
        assert set(record["frames"]) == set(record["audible"]) and frames == sorted(frames)
        assert len(trial_figures(record)["gaps_ms"]) == len(frames) - 1
        # The whole reply reached the sink, paced: as much sound as the page was sent.
        sent = sum(record["samples"].values())
        audio = np.fromfile(recording, dtype=np.float32)
        loud = np.flatnonzero(np.abs(audio) > 1e-3)
        assert len(loud) and (loud[-1] - loud[0]) > 0.8 * sent, (len(audio), sent)
        assert "The second sentence follows it." in page.inner_text("#log")
        assert page.evaluate("marks.length") > 0, "no word was ever highlighted"
        # The conversation remembers the reply for the next question.
        page.evaluate("voicecli.ask('again')")
        deadline = time.monotonic() + 10
        while len(web.llm.requests) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        history = web.llm.requests[-1].messages
        assert history[-2]["content"] == REPLY and history[-1]["content"] == "again"


def test_the_browser_bench_measures_gaps_on_the_audio_clock_not_the_jittery_page_clock():
    # Two sentences played back to back, and one after 100 ms of silence; the page times
    # mapped through getOutputTimestamp are off by tens of ms either way.
    samples = {"0": 7200, "1": 24000, "2": 4800}
    record = {
        "t": {"sent": 0.0, "first_audible": 500.0},
        "sentences": {"0": "Sure,", "1": "Paris is the capital of France.", "2": "Yes."},
        "audible": {"0": 500.0, "1": 840.0, "2": 1750.0},
        "frames": {"0": 12000, "1": 19200, "2": 19200 + 24000 + 2400},
        "samples": samples,
        "underruns": 1,
    }
    figures = trial_figures(record)
    assert figures["gaps_ms"] == [0.0, pytest.approx(100.0)]
    assert figures["max_gap"] == pytest.approx(100.0) and figures["audible_gaps"] == 1
    assert figures["first_audible"] == 500.0 and figures["substantive"] == 840.0
    assert figures["underruns"] == 1


def test_an_interrupt_silences_the_page_within_one_worklet_block_of_the_flush(
    tiny_synth, tiny_model_dir, browser
):
    with serving(tiny_synth, tiny_model_dir, LONG_REPLY, tokens_per_second=50) as web:
        page = open_page(browser, web.url)
        page.evaluate("() => { window.turn = voicecli.ask('question'); }")
        # Until a word has been heard, by the page's own account (the word it marks has
        # text before it): a fixed wait was too short once under load (heard "").
        page.wait_for_function(
            "(() => { const m = document.querySelector('#speaking mark');"
            " return m !== null && m.previousSibling?.textContent.length > 0; })()"
        )
        # As the server's own: the page does not flush itself first.
        page.evaluate("voicecli.send({type: 'interrupt'})")
        record = page.evaluate("window.turn")
        assert record["interrupted"]
        assert record["t"]["flush_received"] < record["t"]["end"]
        # The worklet renders 128 frames per block: no sample of the turn after the first
        # block that began once the flush arrived.
        assert record["flush_frame"] is not None and record["last_sound"] is not None
        assert record["last_sound"] < record["flush_frame"] + 128
        # Upstream stopped too: the LLM stream was closed before its end.
        assert web.llm.last.disconnected
        # What was heard is what the history keeps.
        assert record["heard"] and record["heard"] in LONG_REPLY


def test_escape_stops_the_reply_at_once_and_the_next_question_is_answered(
    tiny_synth, tiny_model_dir, browser
):
    with serving(tiny_synth, tiny_model_dir, LONG_REPLY, tokens_per_second=50) as web:
        page = open_page(browser, web.url)
        page.evaluate("() => { window.turn = voicecli.ask('question'); }")
        page.wait_for_function("[...voicecli.state.turns.values()].some(r => r.t.first_audible)")
        page.keyboard.press("Escape")
        record = page.evaluate("window.turn")
        assert record["interrupted"]
        assert record["last_sound"] < record["flush_frame"] + 128
        assert web.llm.last.disconnected
        page.evaluate("() => { window.turn = voicecli.ask('next'); }")
        page.wait_for_function("voicecli.state.turns.get(2)?.t.first_audible")
        page.keyboard.press("Escape")
        assert page.evaluate("window.turn")["interrupted"]


def test_two_tabs_are_served_side_by_side(tiny_synth, tiny_model_dir, browser):
    with serving(tiny_synth, tiny_model_dir, REPLY, tokens_per_second=400) as web:
        pages = [open_page(browser, web.url) for _ in range(2)]
        for page in pages:
            page.evaluate("() => { window.turn = voicecli.ask('question'); }")
        records = [page.evaluate("window.turn") for page in pages]
        for record in records:
            assert not record["interrupted"] and record["error"] is None
            assert set(record["audible"]) == set(record["sentences"])
        # Neither waited for the other's reply: both were heard at the same time.
        firsts = [r["t"]["first_audible"] - r["t"]["sent"] for r in records]
        durations = [sum(r["samples"].values()) / 24 for r in records]  # ms
        assert max(firsts) < min(durations), (firsts, durations)
        assert len(web.llm.requests) == 2


# --- the server, as a browser would never talk to it -------------------------------------
def receive_json(ws, kind: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        data = ws.recv(timeout=max(0.01, deadline - time.monotonic()))
        if isinstance(data, str):
            message = json.loads(data)
            if message["type"] == kind:
                return message


def test_bad_messages_get_one_error_each_and_the_tab_lives_on(tiny_synth, tiny_model_dir):
    with serving(tiny_synth, tiny_model_dir, REPLY) as web, connect(web.ws_url) as ws:
        receive_json(ws, m.HELLO)
        for bad, code in (
            ("not json", p.BAD_JSON),
            (b"\x00\x01binary", p.BAD_FRAME),
            (json.dumps({"type": "launch"}), p.UNKNOWN_TYPE),
            (json.dumps({"type": "ask", "text": ""}), p.BAD_REQUEST),
            (json.dumps({"type": "ask", "text": "x" * 5000}), p.TEXT_TOO_LONG),
            (json.dumps({"type": "played", "turn": -1, "position": 0, "underruns": 0}),
             p.BAD_REQUEST),
            (json.dumps({"type": "audible", "turn": 1, "sentence": 0, "after": 1e9}),
             p.BAD_REQUEST),
            (json.dumps({"v": 2, "type": "ask", "text": "hi"}), p.BAD_VERSION),
        ):  # fmt: skip
            ws.send(bad)
            assert receive_json(ws, m.ERROR)["code"] == code, bad
        ws.send(json.dumps({"type": "ask", "text": "still there?"}))
        assert receive_json(ws, m.TURN)["question"] == "still there?"


def test_a_tab_that_floods_is_read_at_its_rate_and_another_is_answered_at_once(
    tiny_synth, tiny_model_dir
):
    # Each question starts an LLM request: unpaced, a tab could send hundreds a second.
    sent = 40
    with (
        serving(tiny_synth, tiny_model_dir, REPLY) as web,
        connect(web.ws_url) as flood,
        connect(web.ws_url) as other,
    ):
        receive_json(flood, m.HELLO)
        receive_json(other, m.HELLO)
        began = time.monotonic()
        for _ in range(sent):
            flood.send("not json")
        other.send(json.dumps({"type": "ask", "text": "still there?"}))
        assert receive_json(other, m.TURN)["question"] == "still there?"
        assert time.monotonic() - began < 2.0
        answered = []
        while len(answered) < sent:
            answered.append((receive_json(flood, m.ERROR, timeout=20.0), time.monotonic()))
        # Its burst at once, the rest at its rate, a refusal counting as eight: nothing
        # it sent is dropped, and it takes seconds, not a moment.
        limits = page_server.TAB_LIMITS
        at_once = limits.message_burst / limits.refusal_cost
        least = (sent - at_once - 1) * limits.refusal_cost / limits.messages_per_second
        assert answered[-1][1] - began >= 0.8 * least, (answered[-1][1] - began, least)


def test_an_oversized_frame_closes_the_connection(tiny_synth, tiny_model_dir):
    with serving(tiny_synth, tiny_model_dir, REPLY) as web, connect(web.ws_url) as ws:
        receive_json(ws, m.HELLO)
        ws.send("x" * (m.MAX_MESSAGE_BYTES + 1))
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                ws.recv(timeout=10)
        assert closed.value.rcvd.code == 1009


def test_a_tab_that_stops_playing_is_ended_and_others_are_not(tiny_synth, tiny_model_dir):
    with (
        serving(
            tiny_synth, tiny_model_dir, REPLY, stall=1.0, tokens_per_second=400, ahead=1.0
        ) as web,
        connect(web.ws_url) as stuck,
        connect(web.ws_url) as healthy,
    ):
        stuck.send(json.dumps({"type": "ask", "text": "talk"}))  # and never says it played
        healthy.send(json.dumps({"type": "ask", "text": "talk"}))
        # The healthy tab reports what it plays; the stuck one's audio (1 s at most) waits.
        played = 0
        ended = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and ended is None:
            data = healthy.recv(timeout=30)
            if isinstance(data, bytes):
                frame = p.decode_server_frame(data)
                turn = int(frame.request_id.split(":")[0])
                played += len(frame.pcm) // 2
                healthy.send(json.dumps({"type": "played", "turn": turn, "position": played,
                                         "underruns": 0}))  # fmt: skip
            elif json.loads(data)["type"] == m.TURN_END:
                ended = json.loads(data)
        assert ended is not None and ended["error"] is None and not ended["interrupted"]
        error = receive_json(stuck, m.ERROR, timeout=30)
        assert error["code"] == p.SLOW_CONSUMER
        with pytest.raises(ConnectionClosed):
            while True:
                stuck.recv(timeout=10)


def test_beyond_loopback_every_request_needs_the_token(tiny_synth, tiny_model_dir):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
    with serving(tiny_synth, tiny_model_dir, REPLY, token="s3cret") as web:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(web.url, timeout=10)
        assert refused.value.code == 401
        assert urllib.request.urlopen(web.url + "?token=s3cret", timeout=10).status == 200
        with pytest.raises((InvalidStatus, ConnectionClosed)):
            with connect(web.ws_url) as ws:
                ws.recv(timeout=10)
        with pytest.raises((InvalidStatus, ConnectionClosed)):
            with connect(web.ws_url + "?token=wrong") as ws:
                ws.recv(timeout=10)
        with connect(web.ws_url + "?token=s3cret") as ws:
            assert receive_json(ws, m.HELLO)["sample_rate"] == 24000


def test_another_sites_page_cannot_open_the_socket(tiny_synth, tiny_model_dir):
    with serving(tiny_synth, tiny_model_dir, REPLY) as web:
        with pytest.raises((InvalidStatus, ConnectionClosed)):
            with connect(web.ws_url, origin="http://evil.example") as ws:
                ws.recv(timeout=10)
        host = web.url.split("/")[2]
        with connect(web.ws_url, origin=f"http://{host}") as ws:
            assert receive_json(ws, m.HELLO)


def test_voicecli_web_fails_in_one_line_on_a_busy_port(tmp_path):
    import sys

    with bind("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "voicecli", "web", "--port", str(port), "--no-engine"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert out.returncode != 0
    lines = [line for line in out.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0], out.stderr
    assert "Traceback" not in out.stderr


# --- acknowledgments ------------------------------------------------------------------
@pytest.mark.parametrize(
    "unit",
    ["Sure,", "Sure!", "Of course!", "Great question.", "Sure, great question!", "OK.",
     "Absolutely —", "  certainly. ", "I’d be happy to help!", "All right,"],
)  # fmt: skip
def test_openers_are_acknowledgments(unit):
    assert is_acknowledgment(unit)


@pytest.mark.parametrize(
    "unit",
    ["Sure, I can help you with that.", "Yes.", "Paris.", "Of course it is.",
     "Sure enough, it rained.", "", "Great question about Paris."],
)  # fmt: skip
def test_content_is_not_an_acknowledgment(unit):
    assert not is_acknowledgment(unit)


def test_the_first_substantive_unit_is_found_in_index_order():
    assert first_substantive([(1, "Paris is the capital."), (0, "Sure,")]) == 1
    assert first_substantive([(0, "The answer is 4.")]) == 0
    assert first_substantive([(0, "Sure!"), (1, "Of course.")]) is None


def test_an_llm_that_cannot_be_reached_ends_the_turn_with_why(tiny_synth, tiny_model_dir):
    with serving(tiny_synth, tiny_model_dir, REPLY) as web:
        web.app.llm = OpenAIChat(
            base_url="http://127.0.0.1:9/v1", api_key="x", model="m", max_retries=0
        )
        with connect(web.ws_url) as ws:
            ws.send(json.dumps({"type": "ask", "text": "hello?"}))
            ended = receive_json(ws, m.TURN_END)
            assert ended["error"].startswith("Cannot reach the LLM server at http://127.0.0.1:9/v1")
            ws.send(json.dumps({"type": "ask", "text": "again?"}))  # the tab lives on
            assert receive_json(ws, m.TURN_END)["turn"] == 2
