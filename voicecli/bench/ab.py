"""``voicecli bench``: streaming against buffered on the same reply, measured at the sound.

Each trial is one turn through the real pipeline (LLM stream, segmenter,
synthesizer, sink). The two modes differ only in ``TurnOptions.buffered`` and run
in alternation (streaming, buffered, streaming, ...) so that drift of the machine
hits both alike. The synthesizer and the sink are opened once and reused, and an
uncounted warm-up turn goes first, so no trial pays for loading. With
``--load N`` the command instead drives N concurrent conversations against
``voicecli serve`` (see ``voicecli.bench.load``).

Heavy imports (torch, the LLM client, the report) happen inside the command so
that ``voicecli --help`` stays fast.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from voicecli.bench.machine import machine_info, run_header
from voicecli.bench.metrics import DELIVERIES
from voicecli.bench.scenarios import ScriptedReply
from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import AudioChunk, AudioSink, Sentence, Synthesizer
from voicecli.timeline import Timeline

if TYPE_CHECKING:
    from voicecli.llm.contract import LLM

BETWEEN_TURNS = (
    0.3  # seconds of quiet between turns, so one turn's tail is not the next one's start
)


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
    """Where replies come from: the scripted LLM, a real server, or the embedded model,
    as ``open_llm`` opens them for chat, with no retries (a retried request would hide
    its time) and the trial's timeout."""

    kind: str  # scripted | openai | local
    llm: LLM
    messages: list[dict[str, str]]
    description: dict[str, Any]


def open_text_source(
    stack: Any,
    *,
    llm: str,
    reply: ScriptedReply | None,
    tokens_per_second: float,
    settings: Any,
    prompt: str,
    timeout: float,
) -> TextSource:
    from voicecli import display
    from voicecli.llm.open import open_llm

    messages = [
        {"role": "system", "content": settings.system_prompt},
        {"role": "user", "content": prompt},
    ]

    def opened(kind: str, **changes: Any) -> LLM:
        chosen = open_llm(
            replace(settings, llm=kind, llm_timeout=timeout, **changes), max_retries=0
        )
        stack.callback(chosen.close)
        return chosen

    if llm == "scripted":
        from voicecli.bench.scripted_llm import ScriptedLLM

        assert reply is not None
        server = stack.enter_context(ScriptedLLM(reply.script(tokens_per_second)))
        return TextSource(
            "scripted",
            opened(
                "openai",
                base_url=server.base_url,
                api_key="bench",
                model="scripted",
                temperature=None,
                max_tokens=None,
            ),
            [{"role": "user", "content": "bench"}],
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
        # In this process: the engine's model would be shared with whatever else uses it.
        local = opened("local", engine=False, temperature=temperature)
        with display.err.status("Starting the embedded LLM…", spinner="dots"):
            local.ready()
        return TextSource(
            "local",
            local,
            messages,
            {
                "kind": "local",
                "model": local.model,
                "model_path": str(settings.llm_model_path or local.describe()),
                "threads": settings.llm_threads,
                "nice": settings.llm_nice,
                "prompt": prompt,
            },
        )
    if not settings.base_url and not settings.api_key:
        raise VoiceCliError(
            "--llm openai needs --base-url or --api-key (or OPENAI_BASE_URL / OPENAI_API_KEY)."
        )
    return TextSource(
        "openai",
        opened("openai", temperature=temperature),
        messages,
        {
            "kind": "openai",
            "base_url": settings.base_url or "api.openai.com",
            "model": settings.model,
            "prompt": prompt,
        },
    )


# --- one run -----------------------------------------------------------------------
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

    cancel = CancelToken()
    timeline = Timeline(label)
    client = source.llm
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
    from voicecli.audio.sinks import make_sink
    from voicecli.pipeline import SpeechPipeline
    from voicecli.speech import make_synthesizer

    with ExitStack() as stack:
        source = open_text_source(
            stack,
            llm=llm,
            reply=reply,
            tokens_per_second=tokens_per_second,
            settings=settings,
            prompt=prompt,
            timeout=timeout,
        )
        with display.err.status("Loading the speech model…", spinner="dots"):
            synth = make_synthesizer(settings)
        stack.callback(synth.close)
        sink = make_sink(settings, synth.sample_rate)
        stack.callback(sink.close)
        measured = MeasuredSynth(synth)
        pipeline = SpeechPipeline(measured, sink)
        run: dict[str, Any] = {
            **run_header("ab"),
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
        time.sleep(BETWEEN_TURNS)
        for pair in range(trials):
            for mode in DELIVERIES:
                progress(f"trial {pair + 1}/{trials} {mode}")
                trial = run_trial(
                    pipeline, measured, source, mode=mode, label=f"{mode}-{pair + 1}", **options
                )
                trial["pair"] = pair
                run["trials"].append(trial)
                time.sleep(BETWEEN_TURNS)
        run["machine"] = machine_info()  # torch is imported by now: record its threads
        return run
