"""Who may ask the servers: real HTTP requests and WebSocket handshakes that set Host and
Origin as a page rebound to this machine (DNS rebinding) or another site's page would,
against a real ``voicecli web`` and a real ``voicecli serve`` (uvicorn, in a thread)."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from tests.server_harness import RunningServer, StandInModel
from voicecli.bench.scripted_llm import Script, ScriptedLLM
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.llm.openai_chat import OpenAIChat
from voicecli.server.guard import is_loopback
from voicecli.server.run import bind
from voicecli.web.page_server import WebApp, web_server

WS_HEADERS = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}


def ask(port: int, path: str, host: str, **headers: str) -> tuple[int, http.client.HTTPResponse]:
    """One request with exactly these Host and headers; its status (101 for a WebSocket
    accepted)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
    conn.putheader("Host", host)
    for name, value in headers.items():
        conn.putheader(name.replace("_", "-"), value)
    conn.endheaders()
    response = conn.getresponse()
    status = response.status
    if status != 101:
        response.read()
    conn.close()
    return status, response


@contextmanager
def web(tiny_synth, tiny_model_dir, token: str | None = None) -> Iterator[int]:
    settings = Settings(voice="af_tiny", model_dir=tiny_model_dir, engine=False)
    with ScriptedLLM(Script.from_text("Hello.", 200.0)) as llm:
        chat = OpenAIChat(base_url=llm.base_url, api_key="test", model="scripted")
        server = web_server(WebApp(settings, tiny_synth, chat, token))
        sock = bind("127.0.0.1", 0)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            assert thread.is_alive()
            time.sleep(0.01)
        try:
            yield sock.getsockname()[1]
        finally:
            server.should_exit = True
            thread.join(10)


def test_loopback_names_and_only_those():
    for host in ("localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]", "app.localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "192.168.1.5", "evil.example", "localhost.evil.example", ""):
        assert not is_loopback(host), host


def test_a_rebound_page_cannot_reach_voicecli_web(tiny_synth, tiny_model_dir):
    with web(tiny_synth, tiny_model_dir) as port:
        evil = f"evil.example:{port}"
        # The page itself, and its WebSocket, as the rebound page would ask for them.
        assert ask(port, "/", evil)[0] == 403
        assert ask(port, "/page.js", evil)[0] == 403
        assert ask(port, "/ws", evil, Origin=f"http://{evil}", **WS_HEADERS)[0] == 403
        # Another site's page, whatever Host its request carries.
        local = f"127.0.0.1:{port}"
        assert ask(port, "/ws", local, Origin="http://evil.example", **WS_HEADERS)[0] == 403
        assert ask(port, "/ws", local, Origin="null", **WS_HEADERS)[0] == 403
        # This machine's own names, and the page's own Origin.
        for name in (local, f"localhost:{port}", f"[::1]:{port}"):
            assert ask(port, "/", name)[0] == 200, name
        status, _ = ask(port, "/ws", local, Origin=f"http://{local}", **WS_HEADERS)
        assert status == 101


def test_with_a_token_every_path_needs_it_and_the_page_carries_it(tiny_synth, tiny_model_dir):
    with web(tiny_synth, tiny_model_dir, token="s3cret") as port:
        local = f"127.0.0.1:{port}"
        for path in ("/", "/page.js", "/worklet.js", "/page.css", "/ws"):
            assert ask(port, path, local)[0] == 401, path
        status, response = ask(port, "/?token=s3cret", local)
        assert status == 200
        cookie = response.getheader("set-cookie")
        assert "voicecli_token=s3cret" in cookie and "HttpOnly" in cookie
        assert "SameSite=strict" in cookie.replace("Strict", "strict")
        # The page's own requests carry the cookie: its scripts, its worklet, its socket.
        sent = {"Cookie": "voicecli_token=s3cret"}
        for path in ("/page.js", "/worklet.js", "/page.css"):
            assert ask(port, path, local, **sent)[0] == 200, path
        assert ask(port, "/ws", local, Origin=f"http://{local}", **sent, **WS_HEADERS)[0] == 101
        assert ask(port, "/page.js", local, Cookie="voicecli_token=wrong")[0] == 401


class Speaking(StandInModel):
    """Says a tenth of a second of a tone for every text."""

    def speak_steps(self, chunks, cancel=None, voice=None, speed=None):
        from voicecli.tts.steps import AudioPart

        yield AudioPart(np.full(2400, 0.1, np.float32))


@contextmanager
def serve(host: str = "127.0.0.1", key: str | None = None) -> Iterator[RunningServer]:
    running = RunningServer(Speaking, host=host, key=key).start()
    try:
        yield running
    finally:
        running.stop()


def test_a_rebound_page_cannot_reach_voicecli_serve():
    with serve() as server:
        port = server.port
        assert ask(port, "/ping", f"evil.example:{port}")[0] == 403
        ws = "/invocations-bidirectional-stream"
        evil = f"evil.example:{port}"
        assert ask(port, ws, evil, Origin=f"http://{evil}", **WS_HEADERS)[0] == 403
        local = f"127.0.0.1:{port}"
        assert ask(port, ws, local, Origin="http://evil.example", **WS_HEADERS)[0] == 403
        assert ask(port, "/ping", local)[0] in (200, 503)  # up, its model loading or not
        assert ask(port, ws, local, **WS_HEADERS)[0] == 101  # not a browser: no Origin


def test_the_sagemaker_container_answers_its_runtime_as_before():
    """Bound beyond loopback without a key, as the container is: SageMaker's Host and no
    Origin are served; a browser's page still is not."""
    with serve(host="0.0.0.0") as server:
        port = server.port
        runtime = "runtime.sagemaker.us-east-1.amazonaws.com"
        assert ask(port, "/ping", runtime)[0] in (200, 503)
        origin = "http://evil.example"
        assert ask(port, "/ping", runtime, Origin=origin)[0] == 403


def test_serve_with_a_key_serves_only_those_who_send_it():
    from voicecli.cancel import CancelToken
    from voicecli.frames import Sentence
    from voicecli.timeline import Timeline
    from voicecli.tts.remote import WebSocketSynthesizer

    with serve(host="0.0.0.0", key="k3y") as server:
        port = server.port
        name = f"192.0.2.7:{port}"
        assert ask(port, "/ping", name)[0] == 401
        assert ask(port, "/ping", name, Authorization="Bearer wrong")[0] == 401
        assert ask(port, "/ping", name, Authorization="Bearer k3y")[0] in (200, 503)
        turn = [Sentence(0, "Hello.")]
        with pytest.raises(VoiceCliError, match="needs its key"):
            list(WebSocketSynthesizer(server.ws_url).stream(turn, CancelToken(), Timeline()))
        synth = WebSocketSynthesizer(server.ws_url, key="k3y")
        server.wait_ready()
        chunks = list(synth.stream(turn, CancelToken(), Timeline()))
        assert chunks and chunks[-1].last
