"""``voicecli bench``: streaming against buffered on the same reply, measured at the sound.

Each trial is one turn through the real pipeline (LLM stream, segmenter,
synthesizer, sink). The two modes differ only in ``TurnOptions.buffered`` and run
in alternation (streaming, buffered, streaming, ...) so that drift of the machine
hits both alike. The synthesizer and the sink are opened once and reused, and an
uncounted warm-up turn goes first, so no trial pays for loading. With
``--load N`` the command instead drives N concurrent conversations against
``voicecli serve`` (see ``bench_load``).

Heavy imports (torch, the LLM client, the report) happen inside the command so
that ``voicecli --help`` stays fast.
"""

from __future__ import annotations

import os
import platform
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from voicecli.bench_scenarios import SCENARIOS, ScriptedReply
from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import MAX_SPEED, MIN_SPEED, AudioChunk, AudioSink, Sentence, Synthesizer
from voicecli.timeline import Timeline

MODES = ("streaming", "buffered")
DEFAULT_OUT = Path("bench-out")
SETTLE = 0.3  # seconds of quiet between turns, so one turn's tail is not the next one's start
DEFAULT_PROMPT = "Explain in five short spoken sentences how to fix a slow home Wi-Fi connection."


# --- measuring wrappers ----------------------------------------------------------
@dataclass
class SynthUsage:
    """Per sentence of one turn: samples produced and seconds spent inside the synthesizer."""

    samples: dict[int, int] = field(default_factory=dict)
    busy: dict[int, float] = field(default_factory=dict)


class MeasuredSynth:
    """Passes a synthesizer through, counting samples and its own compute time per sentence.

    SYNTH_START..SYNTH_END also covers time the pipeline spent blocked writing into a
    full ring buffer between chunks; the time inside the synthesizer's ``next()``,
    minus time it waited there for the next sentence, does not, so it is the honest
    numerator of a real-time factor.
    """

    def __init__(self, synth: Synthesizer) -> None:
        self.synth = synth
        self.sample_rate: int = synth.sample_rate
        self.capabilities = synth.capabilities
        self.usage = SynthUsage()

    def begin_turn(self) -> SynthUsage:
        self.usage = SynthUsage()
        return self.usage

    def stream(
        self, sentences: Iterable[Sentence], cancel: CancelToken, timeline: Timeline
    ) -> Iterator[AudioChunk]:
        usage = self.usage
        caller = threading.get_ident()
        waited = [0.0]

        def fed() -> Iterator[Sentence]:
            it = iter(sentences)
            while True:
                start = time.perf_counter()
                try:
                    sentence = next(it)
                except StopIteration:
                    return
                finally:
                    # Remote synthesizers read sentences on their own sender thread:
                    # that wait does not hold up this thread's next().
                    if threading.get_ident() == caller:
                        waited[0] += time.perf_counter() - start
                yield sentence

        chunks = self.synth.stream(fed(), cancel, timeline)
        try:
            while True:
                before, start = waited[0], time.perf_counter()
                try:
                    chunk = next(chunks)
                except StopIteration:
                    return
                busy = time.perf_counter() - start - (waited[0] - before)
                usage.busy[chunk.sentence] = usage.busy.get(chunk.sentence, 0.0) + busy
                usage.samples[chunk.sentence] = usage.samples.get(chunk.sentence, 0) + int(
                    chunk.samples.size
                )
                yield chunk
        finally:
            chunks.close()

    def set_voice(self, voice: str) -> None:
        self.synth.set_voice(voice)

    def set_speed(self, speed: float) -> None:
        self.synth.set_speed(speed)

    def warm_up(self) -> None:
        self.synth.warm_up()

    def describe(self) -> dict[str, Any]:
        return self.synth.describe()

    def close(self) -> None:
        self.synth.close()


def timed_source(source: Iterable[str], arrivals: list[float]) -> Iterator[str]:
    """The LLM's pieces, recording when each arrived (for the waterfall's token ticks)."""
    for piece in source:
        arrivals.append(time.monotonic())
        yield piece


# --- text sources ------------------------------------------------------------------
@dataclass
class TextSource:
    """Where replies come from: the scripted LLM, a real server, or the embedded model."""

    kind: str  # scripted | openai | local
    base_url: str
    api_key: str
    model: str
    messages: list[dict[str, str]]
    temperature: float | None
    max_tokens: int | None
    description: dict[str, Any]


def open_text_source(
    stack: Any,
    *,
    llm: str,
    reply: ScriptedReply | None,
    tokens_per_second: float,
    settings: Any,
    prompt: str,
) -> TextSource:
    from voicecli import display

    messages = [
        {"role": "system", "content": settings.system_prompt},
        {"role": "user", "content": prompt},
    ]
    if llm == "scripted":
        from voicecli.scripted_llm import ScriptedLLM

        assert reply is not None
        server = stack.enter_context(ScriptedLLM(reply.script(tokens_per_second)))
        return TextSource(
            "scripted",
            server.base_url,
            "bench",
            "scripted",
            [{"role": "user", "content": "bench"}],
            None,
            None,
            {
                "kind": "scripted",
                "tokens": len(reply.tokens),
                "tokens_per_second": tokens_per_second,
                "pauses": {str(k): v for k, v in reply.pauses.items()},
            },
        )
    # Real LLMs: temperature 0 so that every trial gets, as far as the model allows,
    # the same reply; the report says so if the replies differed anyway.
    temperature = 0.0 if settings.temperature is None else settings.temperature
    if llm == "local":
        from voicecli.llm_local import LocalLLMServer

        local = LocalLLMServer(settings.llm_model_path)
        stack.callback(local.stop)
        with display.err.status("Starting the embedded LLM…", spinner="dots"):
            local.start()
        return TextSource(
            "local",
            local.base_url,
            local.api_key,
            local.model_name,
            messages,
            temperature,
            settings.max_tokens,
            {
                "kind": "local",
                "model": local.model_name,
                "model_path": str(local.model_path),
                "prompt": prompt,
            },
        )
    if not settings.base_url and not settings.api_key:
        raise VoiceCliError(
            "--llm openai needs --base-url or --api-key (or OPENAI_BASE_URL / OPENAI_API_KEY)."
        )
    return TextSource(
        "openai",
        settings.base_url,
        settings.api_key,
        settings.model,
        messages,
        temperature,
        settings.max_tokens,
        {
            "kind": "openai",
            "base_url": settings.base_url or "api.openai.com",
            "model": settings.model,
            "prompt": prompt,
        },
    )


# --- one run -----------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }
    try:
        info["usable_cores"] = len(os.sched_getaffinity(0))
    except AttributeError:
        info["usable_cores"] = os.cpu_count()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        # Other work on the machine skews every figure: record how busy it was.
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
    return info


def describe_output(sink: AudioSink) -> dict[str, Any]:
    if sink.capabilities.paced:
        label = {
            "played_means": "dac",
            "played_label": "at the device (PortAudio outputBufferDacTime)",
        }
    else:
        label = {
            "played_means": "written",
            "played_label": "written to the WAV file: NOT at the sound (--no-play)",
        }
    return {**sink.describe(), **label}


def run_trial(
    pipeline: Any,
    measured: MeasuredSynth,
    source: TextSource,
    *,
    mode: str,
    label: str,
    fast_first: bool,
    code: str,
    timeout: float,
) -> dict[str, Any]:
    from voicecli.pipeline import TurnOptions
    from voicecli.sources import ChatClient

    cancel = CancelToken()
    timeline = Timeline(label)
    client = ChatClient(
        base_url=source.base_url,
        api_key=source.api_key,
        model=source.model,
        temperature=source.temperature,
        max_tokens=source.max_tokens,
        timeout=timeout,
        max_retries=0,
    )
    usage = measured.begin_turn()
    arrivals: list[float] = []
    watchdog = threading.Timer(timeout, cancel.cancel, args=("timeout",))
    watchdog.daemon = True
    watchdog.start()
    try:
        result = pipeline.run(
            timed_source(client.stream(source.messages, cancel, timeline), arrivals),
            TurnOptions(buffered=mode == "buffered", fast_first=fast_first, code=code),
            cancel=cancel,
            timeline=timeline,
        )
    finally:
        watchdog.cancel()
    error = str(result.error) if result.error else None
    if cancel.reason == "timeout":
        error = f"the turn took longer than {timeout:g} s and was cancelled"
    return {
        "mode": mode,
        "label": label,
        "text": result.text,
        "error": error,
        "interrupted": result.interrupted,
        "token_arrivals": arrivals,
        "sentences": [
            {
                "index": s.index,
                "display": s.display,
                "spoken": s.text,
                "samples": usage.samples.get(s.index, 0),
                "synth_busy_s": usage.busy.get(s.index),
            }
            for s in result.sentences
        ],
        "timeline": timeline.to_dict(),
    }


def run_ab(
    settings: Any,
    *,
    trials: int,
    llm: str,
    reply: ScriptedReply | None,
    tokens_per_second: float,
    prompt: str,
    timeout: float,
    scenario: str,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    from contextlib import ExitStack

    from voicecli import display
    from voicecli.audio.sink import make_sink
    from voicecli.pipeline import SpeechPipeline
    from voicecli.tts.factory import make_synthesizer

    with ExitStack() as stack:
        source = open_text_source(
            stack,
            llm=llm,
            reply=reply,
            tokens_per_second=tokens_per_second,
            settings=settings,
            prompt=prompt,
        )
        with display.err.status("Loading the speech model…", spinner="dots"):
            synth = make_synthesizer(settings)
        stack.callback(synth.close)
        sink = make_sink(settings, synth.sample_rate)
        stack.callback(sink.close)
        measured = MeasuredSynth(synth)
        pipeline = SpeechPipeline(measured, sink)
        run: dict[str, Any] = {
            "kind": "ab",
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": sys.argv,
            "machine": machine_info(),
            "scenario": scenario,
            "text": reply.text if reply is not None else None,
            "llm": source.description,
            "voice": settings.voice,
            "speed": settings.speed,
            "lang": settings.lang,
            "synth": synth.describe(),
            "sample_rate": synth.sample_rate,
            "output": describe_output(sink),
            "fast_first": settings.fast_first,
            "trials_per_mode": trials,
            "order": "alternating, streaming first: S B S B ...",
            "warmup": None,
            "trials": [],
        }
        options = {"fast_first": settings.fast_first, "code": settings.code, "timeout": timeout}
        progress("warm-up turn (not counted)")
        run["warmup"] = run_trial(
            pipeline, measured, source, mode="streaming", label="warm-up", **options
        )
        if run["warmup"]["error"]:
            raise VoiceCliError(f"The warm-up turn failed: {run['warmup']['error']}")
        time.sleep(SETTLE)
        for pair in range(trials):
            for mode in MODES:
                progress(f"trial {pair + 1}/{trials} {mode}")
                trial = run_trial(
                    pipeline, measured, source, mode=mode, label=f"{mode}-{pair + 1}", **options
                )
                trial["pair"] = pair
                run["trials"].append(trial)
                time.sleep(SETTLE)
        run["machine"] = machine_info()  # torch is imported by now: record its threads
        return run


def run_quality(settings: Any, reply: ScriptedReply, name: str, output_dir: Path) -> None:
    from voicecli import bench_quality, bench_report, display
    from voicecli.pipeline import TextUnits, TurnOptions
    from voicecli.tts.kokoro_local import KokoroSynthesizer

    if settings.endpoint_url or settings.sagemaker_endpoint:
        raise VoiceCliError("--quality measures the local Kokoro decoder: drop the endpoint.")
    units = TextUnits(TurnOptions(code=settings.code))
    texts = [spoken for _, spoken in units.feed(reply.text) + units.flush()]
    with display.err.status("Loading the speech model…", spinner="dots"):
        synth = KokoroSynthesizer(
            voice=settings.voice, speed=settings.speed, lang=settings.lang,
            model_dir=settings.model_dir,
        )  # fmt: skip
    display.note(f"rendering {len(texts)} sentences {len(bench_quality.STRATEGIES) + 2} ways")
    result = bench_quality.measure(synth, texts)
    stem = f"quality-{name}"
    paths = bench_quality.write_wavs(result.pop("audio"), output_dir, stem)
    result.update(machine=machine_info(), synth=synth.describe(), scenario=name)
    paths.insert(0, bench_report.write_json(result, output_dir / f"{stem}.json"))
    for line in bench_quality.report_lines(result):
        display.out.print(line, markup=False)
    for path in paths:
        display.note(f"wrote {path}")


# --- the command ---------------------------------------------------------------------
def parse_load(value: str) -> list[int]:
    try:
        levels = [int(part) for part in value.replace(" ", "").split(",") if part]
    except ValueError:
        raise VoiceCliError(f"--load {value!r}: give a number or a list like 1,2,4,8.") from None
    if not levels or any(n < 1 or n > 64 for n in levels):
        raise VoiceCliError(f"--load {value!r}: each level must be 1 to 64 conversations.")
    return sorted(set(levels))


@click.command()
@click.option(
    "--trials",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="Trials per mode (modes alternate: streaming, buffered, ...).",
)
@click.option(
    "--scenario",
    type=click.Choice(list(SCENARIOS)),
    default="medium",
    show_default=True,
    help="Built-in reply: "
    + "; ".join(f"{s.name}: {s.description}" for s in SCENARIOS.values())
    + ".",
)
@click.option(
    "--text-file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Your own reply to replay; [[pause 2.0]] marks a pause in the stream.",
)
@click.option(
    "--tokens-per-second",
    type=click.FloatRange(1.0, 10000.0),
    default=50.0,
    show_default=True,
    help="Token rate of the scripted LLM.",
)
@click.option(
    "--llm",
    type=click.Choice(["scripted", "openai", "local"]),
    default=None,
    help="Where the text comes from (default: scripted, or openai with --base-url).",
)
@click.option("--base-url", help="A real OpenAI-compatible server to take replies from.")
@click.option("--api-key", help="API key for --base-url (default: $OPENAI_API_KEY).")
@click.option("--model", help="Model name on the real LLM server.")
@click.option(
    "--llm-model-path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="GGUF file for --llm local.",
)
@click.option(
    "--prompt",
    default=DEFAULT_PROMPT,
    show_default=True,
    help="The question asked of a real LLM (--llm openai or local).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Config file (default ~/.config/voicecli/config.toml).",
)
@click.option("--voice", help="Kokoro voice.")
@click.option("--speed", type=float, help=f"Speaking rate, {MIN_SPEED} to {MAX_SPEED}.")
@click.option("--lang", help="Kokoro language code (a, b, e, f, h, i, j, p, z).")
@click.option(
    "--model-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Local Kokoro files (config.json, kokoro-v1_0.pth, voices/).",
)
@click.option(
    "--synthesis",
    type=click.Choice(["phrases", "sentence"]),
    help="phrases: decode a sentence in phrases when that avoids silence (default); "
    "sentence: always whole, exact Kokoro.",
)
@click.option("--device", help="Output device: sounddevice index or name.")
@click.option(
    "--play/--no-play",
    default=True,
    show_default=True,
    help="--no-play benches into a WAV file: 'played' then means written.",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="Where the JSON, HTML and PNG go.",
)
@click.option(
    "--fast-first/--no-fast-first",
    default=None,
    help="Cut the first chunk at a clause boundary (default: as chat does).",
)
@click.option("--sagemaker-endpoint", help="Synthesize on this SageMaker endpoint.")
@click.option("--region", help="AWS region of the SageMaker endpoint.")
@click.option("--endpoint-url", help="Synthesize on a voicecli server (ws://HOST:PORT).")
@click.option(
    "--load",
    "load",
    metavar="N[,N...]",
    help="Load mode: N concurrent conversations against `voicecli serve`.",
)
@click.option(
    "--quality",
    is_flag=True,
    help="Instead of timing: how close audio decoded in parts is to whole-sentence audio "
    "(SNR and log-mel distance per chunk, and WAVs of each way), with local Kokoro.",
)
@click.option(
    "--load-turns",
    type=click.IntRange(1, 100),
    default=3,
    show_default=True,
    help="Turns per conversation in load mode.",
)
@click.option(
    "--trial-timeout",
    type=click.FloatRange(5.0, 3600.0),
    default=300.0,
    show_default=True,
    help="Seconds before a turn is cancelled and reported.",
)
@click.option("--verbose", "-v", is_flag=True, default=None, help="Log debug details.")
def bench(**options: Any) -> None:
    """Measure how much sooner streaming speaks than buffered, at the sound.

    Replays the same reply from a scripted LLM (or a real one) through the
    pipeline, alternating streaming and --buffered, and reports each stage from
    the turn timeline: first token, first sentence, synthesis, first audio chunk,
    ring buffer, device. Writes JSON with every timestamp and an HTML waterfall
    to --output-dir.
    """
    from voicecli.cli import user_errors

    user_errors(_bench)(**options)


def _bench(
    *,
    trials: int,
    scenario: str,
    text_file: Path | None,
    tokens_per_second: float,
    llm: str | None,
    prompt: str,
    config_path: Path | None,
    play: bool,
    output_dir: Path,
    load: str | None,
    load_turns: int,
    trial_timeout: float,
    quality: bool,
    **flags: Any,
) -> None:
    from voicecli import bench_report, display
    from voicecli.bench_scenarios import load_text_file, scenario_reply
    from voicecli.cli import settings_from

    reply = load_text_file(text_file) if text_file is not None else scenario_reply(scenario)
    name = text_file.stem if text_file is not None else scenario
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VoiceCliError(f"Cannot create the output directory {output_dir}: {exc}.") from None

    if quality:
        run_quality(settings_from(config_path, **flags), reply, name, output_dir)
        return

    if load is not None:
        from voicecli import bench_load

        settings = settings_from(config_path, **flags)
        levels = parse_load(load)
        result = bench_load.run_load(
            settings,
            levels=levels,
            reply=reply,
            tokens_per_second=tokens_per_second,
            turns=load_turns,
            scenario=name,
            output_dir=output_dir,
            turn_timeout=trial_timeout,
            progress=display.note,
        )
        paths = bench_report.write_load_outputs(result, output_dir, f"load-{name}")
        bench_report.print_load_report(result, display.out)
        for path in paths:
            display.note(f"wrote {path}")
        return

    llm = llm or ("openai" if flags.get("base_url") or flags.get("api_key") else "scripted")
    wav_path = None if play else output_dir / f"bench-{name}.wav"
    settings = settings_from(config_path, play=play, output=wav_path, **flags)
    run = run_ab(
        settings,
        trials=trials,
        llm=llm,
        reply=reply if llm == "scripted" else None,
        tokens_per_second=tokens_per_second,
        prompt=prompt,
        timeout=trial_timeout,
        scenario=name if llm == "scripted" else llm,
        progress=display.note,
    )
    paths = bench_report.write_outputs(run, output_dir, f"bench-{name}")
    bench_report.print_report(run, display.out)
    for path in paths:
        display.note(f"wrote {path}")
