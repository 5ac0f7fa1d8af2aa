"""A local OpenAI-compatible LLM server, found without configuration: each address of
the ``llm_servers`` setting (Ollama, LM Studio, llama.cpp's server and vLLM on their
usual ports) is asked for ``/v1/models`` at once, with a short timeout, and the first in
the list's order that answers with a chat model is taken. Nothing listening costs a
refused connection each, in parallel.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
from dataclasses import dataclass

from voicecli.errors import VoiceCliError

log = logging.getLogger(__name__)

DISCOVERY_TIMEOUT = 0.3  # seconds for a server on this machine to say which models it has
# Models a chat cannot use, as their names say: embeddings, rerankers, speech.
# voicecli's own speech API (on `serve`'s port 8080, llama.cpp's too) lists only these.
NOT_CHAT = ("embed", "rerank", "whisper", "transcribe", "tts", "kokoro", "bge-", "clip")


@dataclass(frozen=True)
class LocalServer:
    name: str  # "ollama", or the address when the setting names none
    host: str
    port: int

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Found:
    server: LocalServer
    models: list[str]  # its chat models, in its order


def parse_servers(entries: tuple[str, ...]) -> list[LocalServer]:
    """``NAME=HOST:PORT`` (or ``HOST:PORT``) entries; a VoiceCliError names a bad one."""
    servers = []
    for entry in entries:
        name, _, address = entry.rpartition("=")
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise VoiceCliError(
                f"Setting llm_servers: {entry!r} is not NAME=HOST:PORT "
                "(for example ollama=127.0.0.1:11434)."
            )
        servers.append(LocalServer(name.strip() or address.strip(), host.strip("[]"), int(port)))
    return servers


def chat_models(body: bytes) -> list[str] | None:
    """The chat models a ``/v1/models`` answer lists; None if it is no such answer."""
    try:
        data = json.loads(body)
        listed = data["data"]
        if not isinstance(listed, list):
            return None
    except (ValueError, KeyError, TypeError):
        return None
    models = []
    for item in listed:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            return None
        if not any(word in item["id"].lower() for word in NOT_CHAT):
            models.append(item["id"])
    return models


def _ask(server: LocalServer, timeout: float) -> list[str] | None:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        conn.request("GET", "/v1/models", headers={"Accept": "application/json"})
        response = conn.getresponse()
        if response.status != 200:
            return None
        return chat_models(response.read(1 << 20))
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def discover(servers: list[LocalServer], timeout: float = DISCOVERY_TIMEOUT) -> Found | None:
    """The first of ``servers`` (in order) with a chat model, all asked at once."""
    answers: list[list[str] | None] = [None] * len(servers)
    done = [threading.Event() for _ in servers]

    def ask(k: int) -> None:
        try:
            answers[k] = _ask(servers[k], timeout)
        finally:
            done[k].set()

    for k in range(len(servers)):
        threading.Thread(target=ask, args=(k,), name="voicecli-llm-probe", daemon=True).start()
    for k, server in enumerate(servers):
        done[k].wait(timeout * 2)  # a thread stuck past its own timeout is not waited for
        models = answers[k]
        if models:
            log.info("found an LLM server: %s at %s (%s)", server.name, server.address, models)
            return Found(server, models)
    return None


def pick_model(models: list[str], wanted: str | None) -> str:
    """``wanted`` if asked for (a server may load it on demand); else the server's first
    chat model."""
    return wanted if wanted else models[0]
