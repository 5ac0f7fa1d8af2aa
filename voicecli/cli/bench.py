"""``voicecli bench``: streaming against buffered at the device (the group's own command),
and one subcommand per other measurement, each with its own options. The benchmarks live
in ``voicecli.bench`` and are imported when the command runs, so that ``voicecli --help``
stays fast.

The mode flags of earlier releases (``bench --startup``...) still work, with a note, and
two of them at once are refused."""

from __future__ import annotations

from collections.abc import Callable
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


def _options(*decorators: Callable) -> Callable:
    def apply(f: Callable) -> Callable:
        for decorator in reversed(decorators):
            f = decorator(f)
        return f

    return apply


def trials_option(default: int = 10, what: str = "Trials per mode (modes alternate).") -> Callable:
    return click.option(
        "--trials", type=click.IntRange(1, 1000), default=default, show_default=True, help=what
    )


reply_options = _options(
    click.option(
        "--scenario",
        type=click.Choice(list(SCENARIOS)),
        default="medium",
        show_default=True,
        help="Built-in reply: "
        + "; ".join(f"{s.name}: {s.description}" for s in SCENARIOS.values())
        + ".",
    ),
    click.option(
        "--text-file",
        type=click.Path(dir_okay=False, exists=True, path_type=Path),
        help="Your own reply to replay; [[pause 2.0]] marks a pause in the stream.",
    ),
    click.option(
        "--tokens-per-second",
        type=click.FloatRange(1.0, 10000.0),
        default=50.0,
        show_default=True,
        help="Token rate of the scripted LLM.",
    ),
)
output_dir_option = click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFAULT_OUT,
    show_default=True,
    help="Where the JSON, HTML and PNG go.",
)
timeout_option = click.option(
    "--trial-timeout",
    type=click.FloatRange(5.0, 3600.0),
    default=300.0,
    show_default=True,
    help="Seconds before a turn is cancelled and reported.",
)
cpu_load_option = click.option(
    "--cpu-load",
    type=click.IntRange(0, 64),
    default=0,
    show_default=True,
    metavar="N",
    help="Run N busy processes at normal priority beside the bench (in their own session, "
    "as programs in another terminal), started and stopped by it.",
)
llm_choice_option = click.option(
    "--llm",
    type=click.Choice(["scripted", "openai", "local"]),
    default=None,
    help="Where the text comes from (default: scripted, or openai with --base-url).",
)


def _bench_command(f: Callable) -> Callable:
    """What every bench runs in: its output directory made, its busy neighbours (``--cpu-load``)
    started and stopped, user errors as one line."""

    def run(output_dir: Path, cpu_load: int = 0, **options: Any) -> None:
        from voicecli.bench.cpu_load import cpu_load as neighbours

        try:
            output_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise VoiceCliError(
                f"Cannot create the output directory {output_dir}: {exc}."
            ) from None
        with neighbours(cpu_load):
            f(output_dir=output_dir, **options)

    run.__name__, run.__doc__ = f.__name__, f.__doc__
    return user_errors(run)


def _reply(scenario: str, text_file: Path | None) -> tuple[Any, str]:
    from voicecli.bench.scenarios import load_text_file, scenario_reply

    if text_file is not None:
        return load_text_file(text_file), text_file.stem
    return scenario_reply(scenario), scenario


def _print(lines: Any, *paths: Path) -> None:
    from voicecli import display

    for line in lines:
        display.out.print(line, markup=False)
    for path in paths:
        display.note(f"wrote {path}")


# Earlier releases' mode flags, and the subcommand each one now is.
LEGACY_MODES = {
    "startup": "startup",
    "listen": "listen",
    "browser": "browser",
    "quality": "quality",
    "isolation": "isolation",
    "turn_taking": "turn-taking",
    "barge_in": "barge-in",
    "load": "load",
    "soak": "soak",
}


class _BenchGroup(click.Group):
    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage(ctx.command_path, "[OPTIONS] | COMMAND [ARGS]...")


@click.group(cls=_BenchGroup, invoke_without_command=True)
@trials_option()
@reply_options
@llm_choice_option
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
@output_dir_option
@llm_options
@timeout_option
@cpu_load_option
# Earlier releases' mode flags (see LEGACY_MODES), and the options only they took.
@click.option("--load", "load", hidden=True)
@click.option("--soak", "soak", type=click.FloatRange(1.0, 86400.0), hidden=True)
@click.option("--quality", is_flag=True, hidden=True)
@click.option("--isolation", is_flag=True, hidden=True)
@click.option("--startup", is_flag=True, hidden=True)
@click.option("--turn-taking", is_flag=True, hidden=True)
@click.option("--barge-in", is_flag=True, hidden=True)
@click.option("--listen", is_flag=True, hidden=True)
@click.option("--browser", is_flag=True, hidden=True)
@click.option("--minutes", type=click.FloatRange(0.1, 120.0), default=5.0, hidden=True)
@click.option("--random-requests", type=click.IntRange(0, 1_000_000), default=10_000, hidden=True)
@click.option("--load-turns", type=click.IntRange(1, 100), default=3, hidden=True)
@click.pass_context
def bench(ctx: click.Context, **options: Any) -> None:
    """Measure how much sooner streaming speaks than buffered, at the sound.

    Without a command: replays the same reply from a scripted LLM (or a real one)
    through the pipeline, alternating streaming and --buffered, and reports each stage
    from the turn timeline: first token, first sentence, synthesis, first audio chunk,
    ring buffer, device. Writes JSON with every timestamp and an HTML waterfall to
    --output-dir. The commands measure everything else.
    """
    if ctx.invoked_subcommand is not None:
        given = [
            param.opts[0]
            for param in ctx.command.params
            if ctx.get_parameter_source(param.name) is not click.core.ParameterSource.DEFAULT
        ]
        if given:
            raise click.UsageError(
                f"{', '.join(given)} before `{ctx.invoked_subcommand}`: a bench command's "
                f"options follow it (voicecli bench {ctx.invoked_subcommand} --help).",
                ctx,
            )
        return
    legacy = {name: options.pop(name) for name in LEGACY_MODES}
    chosen = [name for name, value in legacy.items() if value not in (None, False)]
    extras = {name: options.pop(name) for name in ("minutes", "random_requests", "load_turns")}
    if len(chosen) > 1:
        flags = " and ".join(f"--{name.replace('_', '-')}" for name in chosen)
        raise click.UsageError(f"{flags}: one bench at a time.", ctx)
    if not chosen:
        ctx.invoke(_ab, **options)
        return
    name = chosen[0]
    command = bench.commands[LEGACY_MODES[name]]
    from voicecli import display

    display.note(
        f"`voicecli bench --{name.replace('_', '-')}` is now `voicecli bench "
        f"{command.name}` (the old flag goes in the next release)."
    )
    given = {**options, **extras, "turns": extras["load_turns"], "rounds": options["trials"]}
    if name in ("load", "soak"):
        given[name if name == "load" else "seconds"] = legacy[name]
    accepted = {param.name for param in command.params}
    ctx.invoke(command, **{key: value for key, value in given.items() if key in accepted})


@_bench_command
def _ab(
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
    trial_timeout: float,
    **flags: Any,
) -> None:
    from voicecli import display
    from voicecli.bench import report
    from voicecli.bench.ab import run_ab

    reply, name = _reply(scenario, text_file)
    llm = llm or ("openai" if flags.get("base_url") or flags.get("api_key") else "scripted")
    # The speech path in this process unless --engine: the A/B compares handoffs, and a
    # socket hop is not one of them.
    flags["engine"] = bool(flags.get("engine"))
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
    paths = report.write_outputs(run, output_dir, f"bench-{name}")
    report.print_report(run, display.out)
    for path in paths:
        display.note(f"wrote {path}")


@bench.command()
@trials_option(3, "Trials of each way to start (alternated).")
@synthesis_options
@output_dir_option
@cpu_load_option
@_bench_command
def startup(*, trials: int, config_path: Path | None, output_dir: Path, **flags: Any) -> None:
    """How long from typing `voicecli say` (or `chat --once`) to its first sound, as
    separate processes: engine warm, engine started by the call, and --no-engine,
    alternated; with the client's own CPU time."""
    from voicecli import display
    from voicecli.bench import report
    from voicecli.bench import startup as startup_bench

    result = startup_bench.run_startup(
        settings_from(config_path, **flags), trials=trials, progress=display.note
    )
    path = report.write_json(result, output_dir / "startup.json")
    _print(startup_bench.report_lines(result), path)


@bench.command()
@trials_option(10, "Questions spoken.")
@reply_options
@llm_choice_option
@synthesis_options
@llm_options
@output_dir_option
@timeout_option
@cpu_load_option
@_bench_command
def listen(
    *,
    trials: int,
    scenario: str,
    text_file: Path | None,
    tokens_per_second: float,
    llm: str | None,
    config_path: Path | None,
    output_dir: Path,
    trial_timeout: float,
    **flags: Any,
) -> None:
    """Spoken questions into a virtual microphone, heard and answered as by `chat
    --listen`: each stage from the end of the speech to the reply's first sound at the
    device; and the WER of `voicecli transcribe` on eSpeak NG speech."""
    from voicecli import display
    from voicecli.bench import voice as voice_bench

    reply, _ = _reply(scenario, text_file)
    result = voice_bench.run_voice(
        settings_from(config_path, **flags),
        llm=llm or "scripted",
        reply=reply,
        tokens_per_second=tokens_per_second,
        trials=trials,
        timeout=trial_timeout,
        progress=display.note,
    )
    _print(voice_bench.report_lines(result), voice_bench.write(result, output_dir))


@bench.command()
@trials_option(6, "Pairs of turns (streaming, buffered).")
@reply_options
@synthesis_options
@output_dir_option
@timeout_option
@cpu_load_option
@_bench_command
def browser(
    *,
    trials: int,
    scenario: str,
    text_file: Path | None,
    tokens_per_second: float,
    config_path: Path | None,
    output_dir: Path,
    trial_timeout: float,
    **flags: Any,
) -> None:
    """The A/B on `voicecli web` in a real headless Chromium (Debian's, through
    Playwright): each stage on the page's clock, to the first sample audible at the
    browser's output."""
    from voicecli import display
    from voicecli.bench import browser as browser_bench

    reply, name = _reply(scenario, text_file)
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
    _print(
        browser_bench.report_lines(run), *browser_bench.write(run, output_dir, f"browser-{name}")
    )


@bench.command()
@synthesis_options
@output_dir_option
@_bench_command
def quality(*, config_path: Path | None, output_dir: Path, **flags: Any) -> None:
    """How the first sentence of a turn sounds as voicecli speaks it, against Kokoro's
    whole render (DistillMOS, Whisper's WER, PESQ-WB; WAVs of each), with local Kokoro.
    Needs the quality extra."""
    from voicecli.bench import quality as quality_bench

    quality_bench.run(settings_from(config_path, **flags), output_dir)


@bench.command("turn-taking")
@synthesis_options
@output_dir_option
@_bench_command
def turn_taking(*, config_path: Path | None, output_dir: Path, **flags: Any) -> None:
    """Questions spoken with hesitations inside them, heard by the VAD: how many each
    end-of-turn hangover cuts, what it costs, and a text cue."""
    from voicecli import display
    from voicecli.bench import turn_taking as turn_bench

    result = turn_bench.run_turn_taking(settings_from(config_path, **flags), display.note)
    _print(turn_bench.report_lines(result), turn_bench.write(result, output_dir))


@bench.command("barge-in")
@trials_option(10, "Times the user talks over a reply.")
@click.option(
    "--minutes",
    type=click.FloatRange(0.1, 120.0),
    default=5.0,
    show_default=True,
    help="Minutes of replies played with nobody speaking.",
)
@synthesis_options
@output_dir_option
@cpu_load_option
@_bench_command
def barge_in(
    *, trials: int, minutes: float, config_path: Path | None, output_dir: Path, **flags: Any
) -> None:
    """Replies on speakers whose echo reaches a virtual microphone, echo-cancelled: false
    barge-ins over --minutes of replies with nobody speaking, then --trials times the
    user talking over a reply: speech onset to silence at the device."""
    from voicecli import display
    from voicecli.bench import barge_in as barge_in_bench

    result = barge_in_bench.run_barge_in(
        settings_from(config_path, **flags), minutes=minutes, trials=trials,
        progress=display.note,
    )  # fmt: skip
    _print(barge_in_bench.report_lines(result), barge_in_bench.write(result, output_dir))


@bench.command()
@click.argument("load", metavar="N[,N...]")
@click.option(
    "--turns",
    type=click.IntRange(1, 100),
    default=3,
    show_default=True,
    help="Turns per conversation.",
)
@reply_options
@synthesis_options
@output_dir_option
@timeout_option
@cpu_load_option
@_bench_command
def load(
    *,
    load: str,
    turns: int,
    scenario: str,
    text_file: Path | None,
    tokens_per_second: float,
    config_path: Path | None,
    output_dir: Path,
    trial_timeout: float,
    **flags: Any,
) -> None:
    """N concurrent conversations against `voicecli serve`, for each N given."""
    from voicecli import display
    from voicecli.bench import load as load_bench
    from voicecli.bench import report

    reply, name = _reply(scenario, text_file)
    levels = parse_load(load)
    result = load_bench.run_load(
        settings_from(config_path, **flags),
        levels=levels,
        reply=reply,
        tokens_per_second=tokens_per_second,
        turns=turns,
        scenario=name,
        output_dir=output_dir,
        turn_timeout=trial_timeout,
        progress=display.note,
    )
    paths = report.write_load_outputs(result, output_dir, f"load-{name}")
    report.print_load_report(result, display.out)
    for path in paths:
        display.note(f"wrote {path}")


@bench.command()
@click.option(
    "--rounds",
    type=click.IntRange(1, 1000),
    default=10,
    show_default=True,
    help="Turns of the healthy client beside each hostile one.",
)
@reply_options
@click.option(
    "--random-requests",
    type=click.IntRange(0, 1_000_000),
    default=10_000,
    show_default=True,
    help="Random requests sent before the server's memory is read again.",
)
@synthesis_options
@output_dir_option
@timeout_option
@cpu_load_option
@_bench_command
def isolation(
    *,
    rounds: int,
    scenario: str,
    text_file: Path | None,
    tokens_per_second: float,
    random_requests: int,
    config_path: Path | None,
    output_dir: Path,
    trial_timeout: float,
    **flags: Any,
) -> None:
    """A healthy client of `voicecli serve` alone and beside a non-reading, a flooding
    and a long-text client, then the server's memory around random requests."""
    from voicecli import display
    from voicecli.bench import isolation as isolation_bench
    from voicecli.bench import report

    reply, name = _reply(scenario, text_file)
    result = isolation_bench.run_isolation(
        settings_from(config_path, **flags),
        reply=reply,
        tokens_per_second=tokens_per_second,
        rounds=rounds,
        scenario=name,
        output_dir=output_dir,
        turn_timeout=trial_timeout,
        random_count=random_requests,
        progress=display.note,
    )
    path = report.write_json(result, output_dir / f"isolation-{name}.json")
    _print(isolation_bench.report_lines(result), path)


@bench.command()
@synthesis_options
@reply_options
@trials_option(7, "Requests each way, streamed and whole (they alternate).")
@output_dir_option
@_bench_command
def api(
    *,
    scenario: str,
    text_file: Path | None,
    tokens_per_second: float,
    trials: int,
    config_path: Path | None,
    output_dir: Path,
    **flags: Any,
) -> None:
    """OpenAI's audio API on a `voicecli serve` of its own, with the openai SDK as the
    client: first audio byte streamed against the whole file, every response_format
    decoded back, SSE, transcriptions (WER), hanging up, LLM discovery's cost."""
    from voicecli import display
    from voicecli.bench import api as api_bench

    reply, _ = _reply(scenario, text_file)
    result = api_bench.run_api(
        settings_from(config_path, **flags),
        text=reply.text,
        trials=trials,
        output_dir=output_dir,
        progress=display.note,
    )
    _print(api_bench.report_lines(result), api_bench.write(result, output_dir))


@bench.command()
@click.argument("seconds", type=click.FloatRange(1.0, 86400.0))
@synthesis_options
@output_dir_option
@cpu_load_option
@_bench_command
def soak(*, seconds: float, config_path: Path | None, output_dir: Path, **flags: Any) -> None:
    """Long texts, emoji, ZWJ, unbroken words and punctuation runs among normal turns,
    sent to `voicecli serve` for SECONDS; its memory over time, and how far it stays
    above its post-warm-up baseline after 10 s idle."""
    from voicecli import display
    from voicecli.bench import report
    from voicecli.bench import soak as soak_bench

    result = soak_bench.run_soak(
        settings_from(config_path, **flags),
        seconds=seconds,
        idle=SOAK_IDLE,
        output_dir=output_dir,
        progress=display.note,
    )
    path = report.write_json(result, output_dir / "soak.json")
    _print(soak_bench.report_lines(result), path)
