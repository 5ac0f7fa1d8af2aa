"""A local LLM server found without configuration: real HTTP servers speaking the
OpenAI chat protocol on the ports of the ``llm_servers`` setting, and `voicecli chat`
finding the first of them."""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread

import pytest
from click.testing import CliRunner

from tests.faulty_llm import FailingLLM
from voicecli.bench.scripted_llm import Script, ScriptedLLM
from voicecli.cli import cli
from voicecli.config import Settings
from voicecli.llm.discover import discover, parse_servers
from voicecli.llm.open import find_local_server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_of(llm: ScriptedLLM) -> int:
    return int(llm.base_url.rsplit(":", 1)[1].split("/")[0])


class ModelList:
    """A server whose /v1/models lists ``models`` (and that can chat with none)."""

    def __init__(self, models: list[str]) -> None:
        body = json.dumps(
            {"object": "list", "data": [{"id": m, "object": "model"} for m in models]}
        )

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def chat_once(monkeypatch, tiny_model_dir, tmp_path, servers: list[str], *more: str):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("VOICECLI_LLM_SERVERS", ",".join(servers))
    args = ["chat", "--model-dir", str(tiny_model_dir), "--voice", "af_tiny"]
    args += ["-o", str(tmp_path / "reply.wav"), *more, "--once", "Say hello."]
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def test_with_nothing_listening_the_search_costs_under_a_tenth_of_a_second():
    servers = parse_servers(tuple(f"s{n}=127.0.0.1:{free_port()}" for n in range(4)))
    began = time.monotonic()
    assert discover(servers) is None
    assert time.monotonic() - began < 0.1


def test_chat_finds_the_first_server_that_answers_and_says_which(
    monkeypatch, tiny_model_dir, tmp_path
):
    with (
        ScriptedLLM(Script.from_text("Hello from Ollama.", 200, model="llama3.2:3b")) as first,
        ScriptedLLM(Script.from_text("Hello from vLLM.", 200, model="qwen")) as second,
    ):
        servers = [
            f"nothing=127.0.0.1:{free_port()}",
            f"ollama=127.0.0.1:{port_of(first)}",
            f"vllm=127.0.0.1:{port_of(second)}",
        ]
        result = chat_once(monkeypatch, tiny_model_dir, tmp_path, servers)
    assert result.exit_code == 0, result.output
    assert f"LLM: ollama at 127.0.0.1:{port_of(first)}, llama3.2:3b" in result.output
    assert "Hello from Ollama." in result.output and not second.requests


def test_the_model_setting_overrides_the_servers_first(monkeypatch, tiny_model_dir, tmp_path):
    with ScriptedLLM(Script.from_text("Hi.", 200, model="llama3.2:3b")) as llm:
        servers = [f"ollama=127.0.0.1:{port_of(llm)}"]
        result = chat_once(monkeypatch, tiny_model_dir, tmp_path, servers, "--model", "phi4")
    assert result.exit_code == 0, result.output
    assert "ollama at" in result.output and ", phi4" in result.output


def test_speech_servers_and_embedding_servers_are_no_chat(monkeypatch):
    speech = ModelList(["kokoro", "tts-1", "gpt-4o-mini-tts", "whisper-1", "gpt-4o-transcribe"])
    embeddings = ModelList(["text-embedding-nomic-embed-text-v1.5"])
    chat = ModelList(["text-embedding-3", "mistral-7b-instruct"])
    try:
        monkeypatch.setenv(
            "VOICECLI_LLM_SERVERS",
            f"a=127.0.0.1:{speech.port},b=127.0.0.1:{embeddings.port},c=127.0.0.1:{chat.port}",
        )
        from voicecli import config

        found = find_local_server(config.resolve())
        assert found is not None and found.server.name == "c"
        assert found.models == ["mistral-7b-instruct"]
    finally:
        for server in (speech, embeddings, chat):
            server.close()


def test_a_found_server_that_fails_is_an_error_not_a_switch(monkeypatch, tiny_model_dir, tmp_path):
    with FailingLLM(Script.from_text("Hi."), 500) as llm:
        result = chat_once(monkeypatch, tiny_model_dir, tmp_path, [f"x=127.0.0.1:{port_of(llm)}"])
    assert result.exit_code == 1
    assert "x at 127.0.0.1" in result.output and "embedded" not in result.output


def test_nothing_found_falls_back_to_the_embedded_model():
    settings = Settings(llm_servers=(f"ollama=127.0.0.1:{free_port()}",))
    assert find_local_server(settings) is None
    assert find_local_server(Settings(base_url="http://127.0.0.1:9/v1")) is None  # configured


@pytest.mark.parametrize("entry", ["ollama", "ollama=127.0.0.1", "x=host:99999", "=:80"])
def test_a_bad_server_entry_is_one_clear_line(entry):
    from voicecli.errors import VoiceCliError

    with pytest.raises(VoiceCliError, match="is not NAME=HOST:PORT"):
        parse_servers((entry,))
