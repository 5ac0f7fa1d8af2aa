"""``voicecli bench``: its options, and which benchmark they pick (A/B, load or
quality). The benchmarks themselves live in ``voicecli.bench``; they are
imported when the command runs, so that ``voicecli --help`` stays fast."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from voicecli.bench.scenarios import SCENARIOS
from voicecli.cli.options import llm_options, settings_from, synthesis_options, user_errors
from voicecli.errors import VoiceCliError

DEFAULT_OUT = Path("bench-out")
SOAK_IDLE = 10.0  # s the soak waits, idle, before it reads the server's memory
DEFAULT_PROMPT = "Explain in five short spoken sentences how to fix a slow home Wi-Fi connection."


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
@click.option(
    "--prompt",
    default=DEFAULT_PROMPT,
    show_default=True,
    help="The question asked of a real LLM (--llm openai or local).",
)
@synthesis_options
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
@llm_options
@click.option(
    "--load",
    "load",
    metavar="N[,N...]",
    help="Load mode: N concurrent conversations against `voicecli serve`.",
)
@click.option(
    "--quality",
    is_flag=True,
    help="Instead of timing: how the first sentence of a turn sounds as voicecli speaks it, "
    "against Kokoro's whole render (DistillMOS, Whisper's WER, PESQ-WB; WAVs of each), "
    "with local Kokoro. Needs the quality extra.",
)
@click.option(
    "--isolation",
    is_flag=True,
    help="Isolation mode: a healthy client of `voicecli serve` alone and beside a "
    "non-reading, a flooding and a long-text client (--trials rounds), then the server's "
    "memory around --random-requests random requests.",
)
@click.option(
    "--startup",
    is_flag=True,
    help="Startup mode: how long from typing `voicecli say` (or `chat --once`) to its "
    "first sound, as separate processes: engine warm, engine started by the call, and "
    "--no-engine, alternated (--trials each); with the client's own CPU time.",
)
@click.option(
    "--turn-taking",
    is_flag=True,
    help="Turn-taking mode: questions spoken with hesitations inside them, heard by the "
    "VAD: how many each end-of-turn hangover cuts, what it costs, and a text cue.",
)
@click.option(
    "--barge-in",
    is_flag=True,
    help="Barge-in mode: replies on speakers whose echo reaches a virtual microphone, "
    "echo-cancelled: false barge-ins over --minutes of replies with nobody speaking, then "
    "--trials times the user talking over a reply: speech onset to silence at the device.",
)
@click.option(
    "--listen",
    is_flag=True,
    help="Voice-input mode: --trials spoken questions into a virtual microphone, heard and "
    "answered as by `chat --listen`: each stage from the end of the speech to the reply's "
    "first sound at the device; and the WER of `voicecli transcribe` on eSpeak NG speech.",
)
@click.option(
    "--browser",
    is_flag=True,
    help="Browser mode: the A/B on `voicecli web` in a real headless Chromium (Debian's, "
    "through Playwright): each stage on the page's clock, to the first sample audible at "
    "the browser's output.",
)
@click.option(
    "--minutes",
    type=click.FloatRange(0.1, 120.0),
    default=5.0,
    show_default=True,
    help="Barge-in mode: minutes of replies played with nobody speaking.",
)
@click.option(
    "--cpu-load",
    type=click.IntRange(0, 64),
    default=0,
    show_default=True,
    metavar="N",
    help="Run N busy processes at normal priority beside the bench (in their own session, "
    "as programs in another terminal), started and stopped by it.",
)
@click.option(
    "--soak",
    "soak",
    type=click.FloatRange(1.0, 86400.0),
    metavar="SECONDS",
    help="Soak mode: long texts, emoji, ZWJ, unbroken words and punctuation runs among "
    "normal turns, sent to `voicecli serve` for SECONDS; its memory over time, and how far "
    "it stays above its post-warm-up baseline after 10 s idle.",
)
@click.option(
    "--random-requests",
    type=click.IntRange(0, 1_000_000),
    default=10_000,
    show_default=True,
    help="Random requests sent in isolation mode before the server's memory is read again.",
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
@user_errors
def bench(**options: Any) -> None:
    """Measure how much sooner streaming speaks than buffered, at the sound.

    Replays the same reply from a scripted LLM (or a real one) through the
    pipeline, alternating streaming and --buffered, and reports each stage from
    the turn timeline: first token, first sentence, synthesis, first audio chunk,
    ring buffer, device. Writes JSON with every timestamp and an HTML waterfall
    to --output-dir.
    """
    from voicecli.bench.cpu_load import cpu_load

    with cpu_load(options.pop("cpu_load")):
        _bench(**options)


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
    isolation: bool,
    startup: bool,
    turn_taking: bool,
    barge_in: bool,
    listen: bool,
    browser: bool,
    minutes: float,
    soak: float | None,
    random_requests: int,
    **flags: Any,
) -> None:
    from voicecli import display
    from voicecli.bench import report
    from voicecli.bench.scenarios import load_text_file, scenario_reply

    reply = load_text_file(text_file) if text_file is not None else scenario_reply(scenario)
    name = text_file.stem if text_file is not None else scenario
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise VoiceCliError(f"Cannot create the output directory {output_dir}: {exc}.") from None

    if quality:
        from voicecli.bench import quality as quality_bench

        quality_bench.run(settings_from(config_path, **flags), output_dir)
        return

    if turn_taking:
        from voicecli.bench import turn_taking as turn_bench

        result = turn_bench.run_turn_taking(settings_from(config_path, **flags), display.note)
        path = turn_bench.write(result, output_dir)
        for line in turn_bench.report_lines(result):
            display.out.print(line, markup=False)
        display.note(f"wrote {path}")
        return

    if barge_in:
        from voicecli.bench import barge_in as barge_in_bench

        result = barge_in_bench.run_barge_in(
            settings_from(config_path, **flags), minutes=minutes, trials=trials,
            progress=display.note,
        )  # fmt: skip
        path = barge_in_bench.write(result, output_dir)
        for line in barge_in_bench.report_lines(result):
            display.out.print(line, markup=False)
        display.note(f"wrote {path}")
        return

    if listen:
        from voicecli.bench import voice as voice_bench

        result = voice_bench.run_voice(
            settings_from(config_path, **flags),
            llm=llm or "scripted",
            reply=reply,
            tokens_per_second=tokens_per_second,
            trials=trials,
            timeout=trial_timeout,
            progress=display.note,
        )
        path = voice_bench.write(result, output_dir)
        for line in voice_bench.report_lines(result):
            display.out.print(line, markup=False)
        display.note(f"wrote {path}")
        return

    if browser:
        from voicecli.bench import browser as browser_bench

        if llm not in (None, "scripted"):
            raise VoiceCliError("bench --browser replays the scripted LLM only.")
        flags["engine"] = bool(flags.get("engine"))  # in-process unless --engine, as the A/B
        run = browser_bench.run_browser(
            settings_from(config_path, **flags),
            reply=reply,
            tokens_per_second=tokens_per_second,
            trials=trials,
            timeout=trial_timeout,
            scenario=name,
            progress=display.note,
        )
        paths = browser_bench.write(run, output_dir, f"browser-{name}")
        for line in browser_bench.report_lines(run):
            display.out.print(line, markup=False)
        for path in paths:
            display.note(f"wrote {path}")
        return

    if startup:
        from voicecli.bench import startup as startup_bench

        result = startup_bench.run_startup(
            settings_from(config_path, **flags), trials=trials, progress=display.note
        )
        path = report.write_json(result, output_dir / "startup.json")
        for line in startup_bench.report_lines(result):
            display.out.print(line, markup=False)
        display.note(f"wrote {path}")
        return

    if soak is not None:
        from voicecli.bench import soak as soak_bench

        result = soak_bench.run_soak(
            settings_from(config_path, **flags),
            seconds=soak,
            idle=SOAK_IDLE,
            output_dir=output_dir,
            progress=display.note,
        )
        path = report.write_json(result, output_dir / "soak.json")
        for line in soak_bench.report_lines(result):
            display.out.print(line, markup=False)
        display.note(f"wrote {path}")
        return

    if isolation:
        from voicecli.bench import isolation as isolation_bench

        result = isolation_bench.run_isolation(
            settings_from(config_path, **flags),
            reply=reply,
            tokens_per_second=tokens_per_second,
            rounds=trials,
            scenario=name,
            output_dir=output_dir,
            turn_timeout=trial_timeout,
            random_count=random_requests,
            progress=display.note,
        )
        path = report.write_json(result, output_dir / f"isolation-{name}.json")
        for line in isolation_bench.report_lines(result):
            display.out.print(line, markup=False)
        display.note(f"wrote {path}")
        return

    if load is not None:
        from voicecli.bench import load as load_bench

        settings = settings_from(config_path, **flags)
        levels = parse_load(load)
        result = load_bench.run_load(
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
        paths = report.write_load_outputs(result, output_dir, f"load-{name}")
        report.print_load_report(result, display.out)
        for path in paths:
            display.note(f"wrote {path}")
        return

    llm = llm or ("openai" if flags.get("base_url") or flags.get("api_key") else "scripted")
    # The speech path in this process unless --engine: the A/B compares handoffs, and a
    # socket hop is not one of them.
    flags["engine"] = bool(flags.get("engine"))
    wav_path = None if play else output_dir / f"bench-{name}.wav"
    settings = settings_from(config_path, play=play, output=wav_path, **flags)
    from voicecli.bench.ab import run_ab

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
    paths = report.write_outputs(run, output_dir, f"bench-{name}")
    report.print_report(run, display.out)
    for path in paths:
        display.note(f"wrote {path}")
