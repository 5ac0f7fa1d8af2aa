"""``voicecli bench api``: OpenAI's audio API on a ``voicecli serve`` of its own, with
the ``openai`` SDK as the client, as other programs reach it.

* **Speech, streamed or whole.** The scenario's text given whole to
  ``/v1/audio/speech``: the first audio byte at the client when the body is streamed,
  against the last byte when the client waits for the whole file, alternated.
* **Every format.** Each ``response_format`` decoded back by PyAV, its duration set
  against the PCM's.
* **Server-sent events.** ``stream_format=sse`` read by a plain SSE client (httpx-sse),
  its audio deltas and its closing event.
* **Transcriptions.** eSpeak NG's 20 sentences through ``transcriptions.create``: WER.
* **Hanging up.** A client that closes mid-stream: how long until the server's CPU is
  idle again.
* **Discovery.** The search for a local LLM server with nothing listening: its cost.
"""

from __future__ import annotations

import base64
import io
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from voicecli.audio.encode import AudioFormat
from voicecli.bench.load import http_base, open_server, wait_for_ping
from voicecli.bench.machine import run_header
from voicecli.bench.metrics import percentile
from voicecli.errors import VoiceCliError

IDLE_CPU = 0.05  # of a core: the server is idle below it
GOALS = {"first_byte_ms": 500.0, "speedup": 3.0, "format_error": 0.01, "wer": 0.10}


def _sdk(base: str) -> Any:
    import openai

    return openai.OpenAI(base_url=f"{base}/v1", api_key="bench", max_retries=0, timeout=300)


def _speech(sdk: Any, text: str, voice: str, fmt: str, stream: bool) -> tuple[float, float, bytes]:
    """(first byte, last byte) in seconds from the request, and the body."""
    began = time.monotonic()
    first = None
    data = bytearray()
    with sdk.audio.speech.with_streaming_response.create(
        model="tts-1", voice=voice, input=text, response_format=fmt
    ) as response:
        if stream:
            for chunk in response.iter_bytes():
                first = first if first is not None else time.monotonic() - began
                data += chunk
        else:
            data += response.read()  # the whole file, as a client that waits for it
            first = time.monotonic() - began
    return first or 0.0, time.monotonic() - began, bytes(data)


def seconds_of(data: bytes, fmt: str, rate: int = 24_000) -> float:
    if fmt == "pcm":
        return len(data) / 2 / rate
    import av

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        return sum(frame.samples for frame in container.decode(stream)) / stream.rate


def _cpu_seconds(pid: int) -> float:
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _hang_up(base: str, text: str, voice: str, pid: int) -> float | None:
    """Seconds from closing a stream mid-body until the server's CPU is idle (below
    ``IDLE_CPU`` over a tenth of a second); None if it never is within 10 s."""
    import httpx

    with httpx.Client(timeout=60) as http:
        with http.stream(
            "POST",
            f"{base}/v1/audio/speech",
            json={"model": "tts-1", "voice": voice, "input": text, "response_format": "pcm"},
        ) as response:
            next(response.iter_bytes())
    closed = time.monotonic()
    last, at = _cpu_seconds(pid), closed
    while time.monotonic() - closed < 10.0:
        time.sleep(0.1)
        now, cpu = time.monotonic(), _cpu_seconds(pid)
        if (cpu - last) / (now - at) < IDLE_CPU:
            return at - closed
        last, at = cpu, now
    return None


def _sse(base: str, text: str, voice: str) -> dict[str, Any]:
    import httpx
    from httpx_sse import connect_sse

    body = {"model": "tts-1", "voice": voice, "input": text, "response_format": "pcm"}
    with httpx.Client(timeout=300) as http:
        sse = {**body, "stream_format": "sse"}
        with connect_sse(http, "POST", f"{base}/v1/audio/speech", json=sse) as source:
            events = [json.loads(event.data) for event in source.iter_sse()]
    kinds = [event.get("type") for event in events]
    audio = b"".join(base64.b64decode(e["audio"]) for e in events if "audio" in e)
    return {
        "events": len(events),
        "deltas": kinds.count("speech.audio.delta"),
        "done_last": bool(kinds) and kinds[-1] == "speech.audio.done",
        "audio_s": round(len(audio) / 2 / 24_000, 2),
        "parsed": bool(audio) and kinds[-1:] == ["speech.audio.done"],
    }


def _transcriptions(base: str, progress: Callable[[str], None]) -> dict[str, Any]:
    from voicecli.audio.wav import WavWriter
    from voicecli.bench.espeak import Espeak
    from voicecli.bench.voice import SENTENCES
    from voicecli.bench.wer import wer

    progress(f"transcribing {len(SENTENCES)} sentences spoken by eSpeak NG, through the SDK")
    sdk = _sdk(base)
    espeak = Espeak()
    rows = []
    with tempfile.TemporaryDirectory(prefix="voicecli-api-") as tmp:
        for n, sentence in enumerate(SENTENCES):
            path = Path(tmp) / f"{n}.wav"
            writer = WavWriter(path, espeak.sample_rate)
            writer.write(espeak.speak(sentence))
            writer.close()
            began = time.monotonic()
            with path.open("rb") as f:
                heard = sdk.audio.transcriptions.create(model="whisper-1", file=f).text
            rows.append(
                {"said": sentence, "heard": heard, "ms": round((time.monotonic() - began) * 1000)}
            )
    return {
        "sentences": rows,
        "wer": round(wer([r["said"] for r in rows], [r["heard"] for r in rows]), 3),
        "ms_p50": percentile([r["ms"] for r in rows[1:]], 50),  # the first loads Whisper
    }


def _discovery() -> dict[str, Any]:
    import socket

    from voicecli.config import Settings
    from voicecli.llm.discover import discover, parse_servers

    # The default list, on ports known to be free: what a machine with no server pays.
    ports = []
    for _ in Settings().llm_servers:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    servers = parse_servers(tuple(f"s{n}=127.0.0.1:{port}" for n, port in enumerate(ports)))
    times = []
    for _ in range(10):
        began = time.monotonic()
        found = discover(servers)
        times.append((time.monotonic() - began) * 1000)
        if found is not None:
            raise VoiceCliError(f"A server answered on a port that was free: {found.server}.")
    return {"ms_p50": round(percentile(times, 50), 1), "ms_max": round(max(times), 1)}


def run_api(
    settings: Any, *, text: str, trials: int, output_dir: Path, progress: Callable[[str], None]
) -> dict[str, Any]:
    if settings.sagemaker_endpoint:
        raise VoiceCliError("bench api drives `voicecli serve`; drop --sagemaker-endpoint.")
    with ExitStack() as stack:
        server = open_server(settings, stack, output_dir / "api-serve.log", progress)
        base = http_base(server["url"])
        pid = server["pid"]
        wait_for_ping(base, 300.0, lambda: None, warm=True)
        sdk = _sdk(base)
        voice = settings.voice
        progress("warm-up request (not counted)")
        _speech(sdk, text, voice, "mp3", stream=True)
        trials_out: list[dict[str, Any]] = []
        for k in range(trials):
            for stream in (True, False) if k % 2 == 0 else (False, True):
                progress(f"trial {k + 1}/{trials}: {'streamed' if stream else 'whole file'}")
                first, last, data = _speech(sdk, text, voice, "mp3", stream)
                trials_out.append(
                    {
                        "stream": stream,
                        "first_byte_ms": round(first * 1000),
                        "last_byte_ms": round(last * 1000),
                        "bytes": len(data),
                    }
                )
        streamed = [t["first_byte_ms"] for t in trials_out if t["stream"]]
        whole = [t["last_byte_ms"] for t in trials_out if not t["stream"]]
        progress("every response_format")
        formats = {}
        for fmt in map(str, AudioFormat):
            _, _, data = _speech(sdk, text, voice, fmt, stream=True)
            formats[fmt] = {"seconds": round(seconds_of(data, fmt), 3), "bytes": len(data)}
        pcm = formats["pcm"]["seconds"]
        for row in formats.values():
            row["error"] = round(abs(row["seconds"] - pcm) / pcm, 4) if pcm else None
        progress("server-sent events")
        sse = _sse(base, text, voice)
        hang_up = _hang_up(base, " ".join([text] * 3), voice, pid) if pid else None
        transcriptions = _transcriptions(base, progress)
    first_p50 = percentile(streamed, 50)
    whole_p50 = percentile(whole, 50)
    return {
        **run_header("api"),
        "voice": voice,
        "text_chars": len(text),
        "server": server,
        "trials": trials_out,
        "first_byte_ms_p50": first_p50,
        "whole_file_ms_p50": whole_p50,
        "speedup": round(whole_p50 / first_p50, 2) if first_p50 else None,
        "formats": formats,
        "sse": sse,
        "hang_up_idle_s": None if hang_up is None else round(hang_up, 2),
        "transcriptions": transcriptions,
        "discovery": _discovery(),
        "goals": GOALS,
    }


def report_lines(result: dict[str, Any]) -> Iterator[str]:
    n = len(result["trials"]) // 2
    speedup = result["speedup"]
    yield (
        f"/v1/audio/speech, {result['text_chars']} characters, {n} trials each (alternated): "
        f"first byte {result['first_byte_ms_p50']:.0f} ms streamed, whole file "
        f"{result['whole_file_ms_p50']:.0f} ms: {speedup}x (goals: <= "
        f"{GOALS['first_byte_ms']:.0f} ms, >= {GOALS['speedup']:g}x)"
    )
    yield "format  seconds  vs pcm   bytes"
    for fmt, row in result["formats"].items():
        yield f"{fmt:<6} {row['seconds']:>8.3f} {row['error'] * 100:>6.2f}% {row['bytes']:>8}"
    sse = result["sse"]
    yield (
        f"sse: {sse['deltas']} deltas, {sse['audio_s']} s of audio, closed by "
        f"speech.audio.done: {'yes' if sse['done_last'] else 'NO'}"
    )
    t = result["transcriptions"]
    yield (
        f"transcriptions: WER {t['wer'] * 100:.1f}% over {len(t['sentences'])} eSpeak NG "
        f"sentences, {t['ms_p50']:.0f} ms each"
    )
    idle = result["hang_up_idle_s"]
    yield f"hang-up mid-stream: the server idle {'never' if idle is None else f'after {idle:g} s'}"
    d = result["discovery"]
    yield f"LLM discovery with nothing listening: {d['ms_p50']} ms (max {d['ms_max']})"


def write(result: dict[str, Any], output_dir: Path) -> Path:
    from voicecli.bench import report

    return report.write_json(result, output_dir / "api.json")
