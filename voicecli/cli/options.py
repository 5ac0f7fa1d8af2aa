"""What the commands share: click option groups, settings with logging, and the
mapping of errors to one line and an exit code."""

from __future__ import annotations

import functools
import logging
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from voicecli import config, display
from voicecli.config import LLMChoice, Precision, SageMakerAPI, Synthesis, choices
from voicecli.errors import VoiceCliError
from voicecli.frames import MAX_SPEED, MIN_SPEED

Decorator = Callable[[Callable], Callable]


def _group(*options: Decorator) -> Decorator:
    def apply(f: Callable) -> Callable:
        for option in reversed(options):
            f = option(f)
        return f

    return apply


config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Config file (default ~/.config/voicecli/config.toml).",
)
verbose_option = click.option(
    "--verbose", "-v", is_flag=True, default=None, help="Log debug details."
)

# Where speech is made and played: chat, say and bench.
synthesis_options = _group(
    config_option,
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
        type=click.Choice(choices(Synthesis)),
        help="phrases: decode a sentence in phrases when that avoids silence (default); "
        "sentence: always whole (exact Kokoro with --precision float32).",
    ),
    click.option(
        "--precision",
        "synth_precision",
        type=click.Choice(choices(Precision)),
        help="The Kokoro decoder's convolutions: auto takes bfloat16 (about 1.5x faster, "
        "33 dB from float32) where the CPU computes it natively.",
    ),
    click.option("--device", help="Output device: sounddevice index or name."),
    click.option("--sagemaker-endpoint", help="Synthesize on this SageMaker endpoint."),
    click.option("--region", help="AWS region of the SageMaker endpoint."),
    click.option(
        "--endpoint-url",
        help="Synthesize on a voicecli server (ws://HOST:PORT); with --sagemaker-endpoint, "
        "the SageMaker runtime's URL (https://...).",
    ),
    click.option(
        "--engine/--no-engine",
        default=None,
        help="Speak through the resident engine, which keeps the model loaded between "
        "commands (default), or load everything in this process.",
    ),
    click.option(
        "--sagemaker-api",
        type=click.Choice(choices(SageMakerAPI)),
        help="auto: the bidirectional stream where its package is installed (Python 3.12+), "
        "else one response stream per sentence.",
    ),
    verbose_option,
)

# What a speaking command does with its audio and its log: chat and say.
output_options = _group(
    click.option(
        "--output",
        "-o",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write the audio to this WAV file (instead of playing it).",
    ),
    click.option(
        "--captions",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write captions of the --output audio, timed word by word, to this file "
        "(.vtt: WebVTT, .srt: SubRip).",
    ),
    click.option("--blocksize", type=int, help="Frames per audio callback (default 480 = 20 ms)."),
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
        "--timings", is_flag=True, default=None, help="Print each turn's timeline after the turn."
    ),
    click.option(
        "--log-file",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Write the log to this file.",
    ),
)

# Which LLM answers: chat and bench.
llm_options = _group(
    click.option("--base-url", help="OpenAI-compatible server (default: $OPENAI_BASE_URL)."),
    click.option("--api-key", help="API key (default: $OPENAI_API_KEY)."),
    click.option("--model", help="Model name on the server."),
    click.option(
        "--llm-model-path",
        type=click.Path(dir_okay=False, path_type=Path),
        help="GGUF file for the embedded LLM.",
    ),
    click.option(
        "--fast-first/--no-fast-first",
        default=None,
        help="Cut the first chunk of a reply at a clause boundary to speak sooner.",
    ),
)


# Who answers, and how: chat and web.
conversation_options = _group(
    click.option(
        "--llm",
        type=click.Choice(choices(LLMChoice)),
        default=None,
        help="auto: a server or key if set, else a server found on this machine "
        "(llm_servers), else the embedded model.",
    ),
    llm_options,
    click.option("--system", "system_prompt", help="System prompt."),
    click.option("--temperature", type=float, help="Sampling temperature."),
    click.option("--max-tokens", type=int, help="Longest reply, in tokens."),
)


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
        # A connection that breaks is voicecli's to report, in one line: the websockets
        # client logs it again, with a traceback, from its keepalive thread.
        logging.getLogger("websockets").setLevel(logging.CRITICAL)


# Hearing the user: chat --listen, mcp.
hearing_options = _group(
    click.option("--input-device", help="Microphone: sounddevice index or name."),
    click.option(
        "--barge-in/--no-barge-in",
        default=None,
        help="Speaking interrupts the reply (on speakers, its echo is cancelled first; the "
        "default), or the microphone is muted while it plays.",
    ),
    click.option(
        "--headphones/--no-headphones",
        default=None,
        help="No echo to cancel: the microphone is heard as it is while a reply plays.",
    ),
    click.option(
        "--asr-model", help="faster-whisper model: tiny.en (default), base.en... or a dir."
    ),
)
