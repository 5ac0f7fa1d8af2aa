"""The embedded LLM's own process: llama.cpp's native server (``xllamacpp``, a prebuilt
wheel, so nothing is compiled at install) speaking the OpenAI protocol on a Unix socket.

``LocalLLMServer`` starts this as ``python -m voicecli.llm.embedded_process CONFIG.json`` and
talks to it through the ``openai`` client, the same streaming path as any remote
server. A Unix socket in a private directory, plus a per-run API key, means no TCP port
and no other local user can reach it.

Settings come from the JSON file only: llama.cpp reads ``LLAMA_ARG_*`` variables
when it parses a command line, and nothing is parsed here, so a user's environment
cannot redirect or reconfigure the server.
"""

from __future__ import annotations

import json
import signal
import sys
import threading


def serve(config: dict) -> None:
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = config["model"]
    params.model_alias = {config["alias"]}
    params.n_ctx = int(config["n_ctx"])
    params.n_parallel = 1  # one reply at a time: clients queue, and each keeps all the context
    params.hostnames = [config["socket"]]  # a path ending in .sock: a Unix socket
    params.api_keys = [config["api_key"]]
    if config.get("n_threads"):
        params.cpuparams.n_threads = int(config["n_threads"])
        params.cpuparams_batch.n_threads = int(config["n_threads"])
    stop = threading.Event()
    # SIGTERM from voicecli (ChildProcess.stop) ends the process through Python, so that
    # the server's destructor closes the socket; the kernel's parent-death SIGKILL needs
    # nothing.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    server = xllamacpp.Server(params)  # loads the model, then listens
    print(f"listening on {server.listening_address}", flush=True)
    stop.wait()
    del server


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m voicecli.llm.embedded_process CONFIG.json", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as f:
        serve(json.load(f))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
