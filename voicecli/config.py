"""One settings object: defaults < config file < environment < flags; the values an
option may take, as enums that config, the CLI and the engine all use."""

from __future__ import annotations

import functools
import os
import tomllib
import types
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from voicecli.errors import VoiceCliError
from voicecli.frames import MAX_SPEED, MIN_SPEED
from voicecli.text import why_bad

DEFAULT_CONFIG_PATH = Path("~/.config/voicecli/config.toml")


class Synthesis(StrEnum):
    PHRASES = "phrases"  # a sentence decoded in phrases, when that avoids silence
    SENTENCE = "sentence"  # always whole: Kokoro exactly, with float32


class Precision(StrEnum):
    """The Kokoro decoder's convolutions."""

    AUTO = "auto"  # bfloat16 where the CPU computes it natively
    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"


class SageMakerAPI(StrEnum):
    AUTO = "auto"  # the bidirectional stream where its package is installed
    BIDIRECTIONAL = "bidirectional"
    RESPONSE_STREAM = "response-stream"


class CodeReading(StrEnum):
    """How code in a reply is spoken."""

    PLACEHOLDER = "placeholder"  # "some code", or its short name
    SKIP = "skip"
    READ = "read"


class LLMChoice(StrEnum):
    AUTO = "auto"  # a server or key if set, else one found on this machine, else embedded
    LOCAL = "local"
    OPENAI = "openai"


E = TypeVar("E", bound=Enum)


def choices(kind: type[Enum]) -> list[str]:
    return [str(member.value) for member in kind]


def parse_choice(kind: type[E], value: Any, what: str) -> E:
    """``value`` as a ``kind``; a VoiceCliError naming the choices otherwise."""
    try:
        return kind(value)
    except ValueError:
        raise VoiceCliError(f"{what} {value!r}: use {', '.join(choices(kind))}.") from None


@dataclass
class Settings:
    # Speech
    voice: str = "af_heart"
    speed: float = 1.0
    lang: str | None = None  # KPipeline lang_code; None: from the voice's first letter
    model_dir: Path | None = None  # local Kokoro files; None: the hub at a pinned revision
    synthesis: Synthesis = Synthesis.PHRASES
    synth_threads: int | None = None  # torch threads for local Kokoro; None: torch's default
    synth_precision: Precision = Precision.AUTO
    # Remote synthesis (SageMaker endpoint, or a local `voicecli serve`)
    sagemaker_endpoint: str | None = None
    region: str | None = None
    endpoint_url: str | None = None  # ws://HOST:PORT; with sagemaker_endpoint, the runtime's URL
    sagemaker_api: SageMakerAPI = SageMakerAPI.AUTO
    # The key a voicecli server requires of its clients beyond loopback (serve), and the
    # one `--endpoint-url` sends to such a server (Authorization: Bearer).
    server_key: str | None = None
    # Listeners serve and the engine speak for at once; None: as many as the model keeps
    # up with in real time (found from its own work). The next is told it is busy.
    listeners: int | None = None
    # The resident engine: Kokoro and the embedded LLM stay loaded in one background
    # process per user, and say and chat become its clients (voicecli engine --help).
    engine: bool = True
    engine_idle: float = 900.0  # seconds with no client before the engine exits
    # OpenAI's audio API on the engine too, on this TCP port (the engine then stays
    # until stopped), and the interface it listens on; beyond loopback, server_key.
    engine_http: int | None = None
    engine_http_host: str = "127.0.0.1"
    runtime_dir: Path | None = None  # its socket's directory; None: $XDG_RUNTIME_DIR/voicecli
    # Output
    device: str | None = None  # sounddevice index or name; None: the default output
    output: Path | None = None  # WAV file
    captions: Path | None = None  # WebVTT (.vtt) or SubRip (.srt) captions of the WAV file
    play: bool | None = None  # None: play unless --output was given
    blocksize: int = 480  # frames per device callback: a fiftieth of a second at 24 kHz
    # Voice input (chat --listen)
    asr_model: str = "tiny.en"  # faster-whisper model name (from the hub) or a directory
    input_device: str | None = None  # microphone: sounddevice index or name; None: default
    listen_hangover: float = 1.0  # seconds of silence that end the user's turn
    max_utterance: float = 30.0  # seconds of speech handed on at most, without a pause
    max_transcribe_seconds: float = 1800.0  # of a file to transcribe, whatever it claims
    # Start the reply at a pause, on what was said so far, silent until the hangover
    # ends the turn with the same words (dropped if the user speaks on).
    early_reply: bool = True
    # Speech while a reply plays interrupts it (on speakers, its echo cancelled first);
    # otherwise the microphone is muted then.
    barge_in: bool = True
    headphones: bool = False  # no echo to cancel (barge-in hears the microphone as it is)
    push_to_talk: bool = False  # hear only while Tab is held (noisy rooms)
    # Backpressure: how much work may wait ahead of the listener
    max_sentences_ahead: int = 32  # sentences waiting for the synthesizer
    max_audio_ahead: float = 10.0  # seconds of synthesized audio waiting in the ring buffer
    # Text handoff
    buffered: bool = False  # release text only when the reply or input is complete
    fast_first: bool = True  # cut the first chunk of a chat reply at a clause boundary
    code: CodeReading = CodeReading.PLACEHOLDER
    # LLM
    llm: LLMChoice = LLMChoice.AUTO
    base_url: str | None = None
    api_key: str | None = None
    # None: OpenAI's gpt-4o-mini, or the first chat model of a server found on this machine.
    model: str | None = None
    # Where ``llm = auto`` looks for an OpenAI-compatible server when neither a base URL
    # nor a key is set (NAME=HOST:PORT, asked at once); none answering: the embedded model.
    llm_servers: tuple[str, ...] = (
        "ollama=127.0.0.1:11434",
        "lmstudio=127.0.0.1:1234",
        "llama.cpp=127.0.0.1:8080",
        "vllm=127.0.0.1:8000",
    )
    llm_model_path: Path | None = None  # GGUF file for the embedded LLM
    llm_threads: int | None = None  # the embedded LLM's threads; None: llama.cpp's default
    llm_nice: int = 10  # the embedded LLM's niceness: speech gets the CPU first (docs/streaming.md)
    system_prompt: str = (
        "You are a helpful voice assistant. Answer in short, natural spoken sentences."
    )
    temperature: float | None = None
    max_tokens: int | None = None
    llm_timeout: float = 20.0  # seconds to connect, and for each piece of the reply
    # Reporting
    timings: bool = False
    # Append each turn's timeline (monotonic timestamps) to this file as a JSON line:
    # how `bench startup` learns when a separate process's first sound played.
    timeline_file: Path | None = None
    verbose: bool = False
    log_file: Path | None = None

    @property
    def plays(self) -> bool:
        """Whether the audio goes to a device: unless --output was given, or --play too."""
        return self.play if self.play is not None else self.output is None


ENV_ALIASES = {
    "base_url": ("OPENAI_BASE_URL",),
    "api_key": ("OPENAI_API_KEY",),
    "region": ("AWS_REGION", "AWS_DEFAULT_REGION"),
}


@functools.cache
def _field_types() -> dict[str, Any]:
    hints = get_type_hints(Settings)
    return {f.name: hints[f.name] for f in fields(Settings)}


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    lowered = str(value).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{value!r} is not true or false")


def _number(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    return float(value)


def _whole(value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(f"{value!r} is not a whole number")
    return int(value)


def _text(value: Any) -> str:
    if not isinstance(value, str | int | float):
        raise ValueError(f"{value!r} is not text")
    why = why_bad(str(value))
    if why is not None:
        raise ValueError(why)
    return str(value)


_CONVERT: dict[type, Callable[[Any], Any]] = {
    Path: lambda value: Path(str(value)).expanduser(),
    bool: _flag,
    float: _number,
    int: _whole,
    str: _text,
}


def _texts(value: Any) -> tuple[str, ...]:
    """A list from a file, or commas between items from the environment or a flag."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise TypeError(f"{value!r} is not a list")
    return tuple(text for item in items if (text := _text(item).strip()))


def _converter(kind: Any) -> Callable[[Any], Any]:
    """How a value from a file, the environment or a flag becomes a field of type
    ``kind`` (``X | None`` converts as ``X``)."""
    if isinstance(kind, types.UnionType):
        (kind,) = (arg for arg in get_args(kind) if arg is not type(None))
    if get_origin(kind) is tuple:
        return _texts
    if isinstance(kind, type) and issubclass(kind, Enum):
        enum = kind

        def member(value: Any) -> Enum:
            try:
                return enum(value)
            except ValueError:
                raise ValueError(f"{value!r}: use {', '.join(choices(enum))}") from None

        return member
    return _CONVERT[kind]


def _coerce(name: str, value: Any, source: str) -> Any:
    if value is None:
        return None
    try:
        return _converter(_field_types()[name])(value)
    except (TypeError, ValueError) as exc:
        raise VoiceCliError(f"Setting {name!r} from {source}: {exc}.") from None


def load_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VoiceCliError(f"Config file {path} does not exist.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise VoiceCliError(f"Config file {path} cannot be read: {exc}.") from None
    except tomllib.TOMLDecodeError as exc:
        raise VoiceCliError(f"Config file {path} is not valid TOML: {exc}.") from None
    known = _field_types()
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise VoiceCliError(
            f"Config file {path} has unknown setting(s): {', '.join(unknown)}. "
            "See config.example.toml for the list."
        )
    return {k: _coerce(k, v, f"config file {path}") for k, v in data.items()}


def from_env(environ: dict[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for name in _field_types():
        for var in (f"VOICECLI_{name.upper()}", *ENV_ALIASES.get(name, ())):
            if env.get(var):
                out[name] = _coerce(name, env[var], f"environment variable {var}")
                break
    return out


def resolve(
    config_path: Path | None = None,
    flags: dict[str, Any] | None = None,
    environ: dict[str, str] | None = None,
) -> Settings:
    """Merge defaults < config file < environment < flags (flags that are None are unset)."""
    values: dict[str, Any] = {}
    path = config_path
    if path is None:
        env = os.environ if environ is None else environ
        path = Path(env["VOICECLI_CONFIG"]) if env.get("VOICECLI_CONFIG") else None
    if path is not None:
        values.update(load_file(Path(path).expanduser()))
    else:
        default = DEFAULT_CONFIG_PATH.expanduser()
        if default.is_file():
            values.update(load_file(default))
    values.update(from_env(environ))
    for name, value in (flags or {}).items():
        if value is not None:
            values[name] = _coerce(name, value, f"flag --{name.replace('_', '-')}")
    settings = Settings(**values)
    validate(settings)
    return settings


# The range of every numeric setting, in one place. Values outside it, and NaN and
# infinities, are refused wherever they come from.
RANGES: dict[str, tuple[float, float]] = {
    "speed": (MIN_SPEED, MAX_SPEED),
    "blocksize": (64, 24000),
    "max_sentences_ahead": (1, 10_000),
    "max_audio_ahead": (0.5, 600.0),
    "temperature": (0.0, 2.0),
    "max_tokens": (1, 1_000_000),
    "llm_timeout": (1.0, 3600.0),
    "synth_threads": (1, 256),
    "llm_threads": (1, 256),
    "llm_nice": (0, 19),
    "engine_idle": (1.0, 7 * 86400.0),
    "engine_http": (1, 65535),
    "listeners": (1, 64),
    "listen_hangover": (0.1, 5.0),
    "max_utterance": (1.0, 120.0),
    "max_transcribe_seconds": (1.0, 86400.0),
}


def validate(s: Settings) -> None:
    for name, (low, high) in RANGES.items():
        value = vars(s)[name]
        if value is not None and not low <= value <= high:  # NaN fails too
            raise VoiceCliError(f"Setting {name}={value}: use {low:g} to {high:g}.")
