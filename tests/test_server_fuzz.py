"""Random control messages, frames and voice strings against a real `voicecli serve`:

* every message gets the replies the protocol documents: exactly one final reply for a
  speak, one error for anything malformed, none for a cancel, ``done`` and close 1000
  for an end, and the session still answers afterwards;
* a session next to it, speaking all along, is not affected;
* the server's memory stays bounded.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed

from tests.server_harness import RunningServer, recv, speak, ws_connect
from tests.test_server_hostile import PacedModel
from voicecli import protocol as p

KEYS = ["v", "type", "request_id", "text", "voice", "speed"]
TYPES = ["speak", "cancel", "end", "hello", "", "SPEAK"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)
voices = st.one_of(
    st.sampled_from(["af_tiny", "af_tiny+am_tiny", "af_tiny:0.3+am_tiny:0.7", "zz_nobody",
                     "../voices/af_tiny", "/etc/passwd", "af_tiny:nan", "af_tiny:inf",
                     "af_tiny:1e-300+am_tiny", "a" * 300, "af_tiny," * 20]),
    st.text(max_size=40),
)  # fmt: skip
speaks = st.fixed_dictionaries(
    {"type": st.just("speak"), "request_id": st.text(min_size=1, max_size=8)
     | st.integers() | st.none(), "text": st.text(max_size=60) | json_values},
    optional={"voice": voices | json_values, "speed": st.floats() | st.integers() | json_values,
              "v": st.sampled_from([1, 2, True, "1", None])},
)  # fmt: skip
controls = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5).map(
    lambda d: {**d, "type": d.get("type", "x")}
) | st.fixed_dictionaries({"type": st.sampled_from(TYPES)},
                          optional={"request_id": json_values})  # fmt: skip
frames = st.one_of(
    speaks.map(json.dumps),
    controls.map(lambda d: json.dumps(d, default=str)),
    st.text(max_size=80),
    st.binary(max_size=80),
    st.binary(max_size=60).map(lambda b: p.MAGIC + bytes([1, 2]) + b),
    st.binary(max_size=60).map(lambda b: p.MAGIC + bytes([1, 1]) + b),
    st.just("[" * 3000),
)


def expected(frame: str | bytes) -> str:
    """What the protocol promises for ``frame``: "final", "error", "none" or "done"."""
    try:
        message = p.decode_client_message(frame)
    except p.ProtocolError:
        return "error"
    kind = message["type"]
    if kind == p.SPEAK:
        return "final"  # a sentence_done, or an error, for this speak
    if kind == p.CANCEL:
        rid = message.get("request_id")
        return "none" if rid is None or isinstance(rid, str) else "error"
    return "done" if kind == p.END else "error"


@pytest.fixture(scope="module")
def fuzz_server(tiny_model_dir: Path):
    running = RunningServer(lambda: PacedModel(part_seconds=0.0)).start()
    running.wait_ready()
    yield running
    running.stop()


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
@given(frame=frames)
def test_every_message_gets_the_documented_replies(fuzz_server: RunningServer, frame) -> None:
    with ws_connect(fuzz_server) as ws:
        ws.send(frame)
        ws.send(speak("probe", "2."))
        replies = []
        try:
            while True:
                message = recv(ws)
                if isinstance(message, p.AudioFrame):
                    assert message.request_id  # audio of the fuzz speak, or of the probe
                    continue
                replies.append(message)
                if message.get("request_id") == "probe" and message["type"] != "error":
                    break
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and closed.rcvd.code in (1000, 1008, 1009)
            assert expected(frame) == "done" or closed.rcvd.code == 1009, (frame, replies)
            return
    assert all(r["v"] == 1 and r["type"] in ("error", "sentence_done", "done") for r in replies)
    others = [r for r in replies if r.get("request_id") != "probe"]
    kind = expected(frame)
    if kind == "error":
        assert len(others) == 1 and others[0]["type"] == "error", (frame, replies)
    elif kind == "final":
        finals = [r for r in others if r["type"] in ("error", "sentence_done")]
        assert len(finals) == 1, (frame, replies)
    else:
        assert kind == "none" and others == [], (frame, replies)


def test_a_fuzzed_server_keeps_its_neighbours_and_its_memory(fuzz_server: RunningServer) -> None:
    before = rss_mib()
    neighbour: dict[str, object] = {}

    def speak_along() -> None:
        with ws_connect(fuzz_server) as ws:
            for i in range(8):  # a session's limit of unanswered speaks
                ws.send(speak(f"n{i}", "20."))
            finals = []
            while len(finals) < 8:
                message = recv(ws)
                if isinstance(message, dict):
                    finals.append(message)
            neighbour["finals"] = finals

    thread = threading.Thread(target=speak_along)
    thread.start()
    test_every_message_gets_the_documented_replies(fuzz_server)  # type: ignore[call-arg]
    thread.join(120)
    finals = neighbour["finals"]
    assert [f["type"] for f in finals] == ["sentence_done"] * 8  # type: ignore[union-attr]
    assert rss_mib() - before < 50
