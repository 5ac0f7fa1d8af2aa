"""The scripted OpenAI-protocol server, misbehaving as real LLM servers do: HTTP errors,
an error event mid-stream, a stream that stops without finishing, a dropped connection,
and a server that accepts a connection and never answers."""

from __future__ import annotations

import json
import socket
import threading
import time

from voicecli.bench.scripted_llm import Reply, Script, ScriptedLLM, Served, _chunk


class FailingLLM(ScriptedLLM):
    """Answers every request with an OpenAI-style HTTP error."""

    def __init__(self, script: Script, status: int) -> None:
        super().__init__(script)
        self.status = status

    def respond(self, reply: Reply, script: Script, served: Served, body: dict) -> None:
        error = {"message": f"scripted HTTP {self.status}", "type": "scripted"}
        reply.json(self.status, {"error": {**error, "code": str(self.status)}})


class BreakingLLM(ScriptedLLM):
    """Streams ``after`` tokens, then breaks the stream the way ``how`` says: an ``error``
    event, a ``cut`` (the stream ends cleanly but unfinished), a ``drop`` of the
    connection in the middle of an HTTP chunk, a ``surrogate`` (text that is not valid
    Unicode) or ``not-json`` (a page that is no event, not even UTF-8)."""

    def __init__(self, script: Script, *, after: int, how: str) -> None:
        super().__init__(script)
        self.after = after
        self.how = how

    def respond(self, reply: Reply, script: Script, served: Served, body: dict) -> None:
        reply.start_stream()
        for i, token in enumerate(script.tokens[: self.after]):
            time.sleep(script.token_interval)
            delta = {"content": token} if i else {"role": "assistant", "content": token}
            reply.event(_chunk(0, script.model, delta, None))
            served.sent_at.append(time.monotonic())
        if self.how == "error":
            reply.event(
                {"error": {"message": "scripted failure mid-stream", "type": "server_error"}}
            )
            reply.end()
        elif self.how == "cut":
            reply.end()  # no finish reason, no [DONE]
        elif self.how == "surrogate":  # half of an emoji's surrogate pair, escaped
            half = {"content": "\ud83d"}
            event = json.dumps(_chunk(0, script.model, half, None), ensure_ascii=True)
            reply.write(f"data: {event}\n\n".encode())
            reply.end()
        elif self.how == "not-json":  # a proxy's error page in the middle of the stream
            reply.write(b"data: <html><body>\xe9rror 502</body></html>\n\n")
            reply.end()
        else:
            reply.handler.wfile.write(b'400\r\ndata: {"choi')  # half a chunk, then gone
            reply.handler.wfile.flush()
            reply.handler.connection.shutdown(socket.SHUT_RDWR)


class SilentServer:
    """Accepts connections and never answers: an LLM server that hangs."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.clients: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.clients.append(client)

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(self, *exc: object) -> None:
        for client in self.clients:
            client.close()
        self.sock.close()
