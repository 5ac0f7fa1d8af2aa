"""A real `voicecli serve` app under uvicorn in a thread, on a free port of 127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from voicecli.server.app import Limits, SpeechModel
from voicecli.server.run import bind, make_server


class RunningServer:
    def __init__(
        self, synth_factory: Callable[[], SpeechModel], limits: Limits | None = None
    ) -> None:
        self.limits = limits or Limits()
        self.server = make_server(synth_factory, self.limits, log_level="warning")
        self.sock = bind("127.0.0.1", 0)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(
            target=self.server.run,
            kwargs={"sockets": [self.sock]},
            name="uvicorn-test",
            daemon=True,
        )

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def start(self) -> RunningServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not self.server.config.app.state.engine.ready.wait(0.05):
            if time.monotonic() > deadline:
                raise RuntimeError("model did not load")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
