"""``voicecli engine``: start, inspect and stop the resident engine that keeps Kokoro
and the embedded LLM loaded for ``say`` and ``chat``; ``run`` is the engine itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from voicecli import display
from voicecli.cli.options import config_option, settings_from, user_errors, verbose_option
from voicecli.config import Precision, Synthesis, choices
from voicecli.errors import VoiceCliError
from voicecli.server.guard import is_loopback


@click.group()
def engine() -> None:
    """The resident engine: the model stays loaded between commands."""


_engine_options = (
    config_option,
    click.option("--voice", help="Default voice (each request may name its own)."),
    click.option("--lang", help="Kokoro language code."),
    click.option("--model-dir", type=click.Path(file_okay=False, path_type=Path)),
    click.option("--synthesis", type=click.Choice(choices(Synthesis))),
    click.option("--precision", "synth_precision", type=click.Choice(choices(Precision))),
    click.option(
        "--idle",
        "engine_idle",
        type=click.FloatRange(1.0, 7 * 86400.0),
        help="Seconds with no client before the engine exits (default 900).",
    ),
    click.option(
        "--http",
        "engine_http",
        type=click.IntRange(1, 65535),
        help="Serve OpenAI's audio API (/v1/audio/speech...) on this TCP port too; the "
        "engine then stays until stopped.",
    ),
    click.option(
        "--http-host",
        "engine_http_host",
        help="Interface for --http (default 127.0.0.1); beyond loopback it needs --api-key.",
    ),
    click.option(
        "--api-key",
        "server_key",
        envvar="VOICECLI_SERVER_KEY",
        help="Required of every --http client (Authorization: Bearer KEY).",
    ),
    verbose_option,
)


def _with_engine_options(f: Any) -> Any:
    for option in reversed(_engine_options):
        f = option(f)
    return f


@engine.command()
@_with_engine_options
@user_errors
def start(config_path: Path | None, **flags: Any) -> None:
    """Start the engine now (say and chat start it on first use anyway)."""
    from voicecli.engine.handle import EngineHandle

    settings = settings_from(config_path, **flags)
    if settings.server_key is not None and not settings.server_key.strip():
        raise VoiceCliError("--api-key is empty: give a secret, or leave it out on loopback.")
    if (
        settings.engine_http is not None
        and not settings.server_key
        and not is_loopback(settings.engine_http_host)
    ):
        raise VoiceCliError(
            f"--http-host {settings.engine_http_host} is beyond this machine: give --api-key "
            "too, which every client must send."
        )
    handle = EngineHandle(settings)
    with display.err.status("Starting the voicecli engine…", spinner="dots"):
        info = handle.ensure()
    _print_status(info.details or {}, handle.socket)


@engine.command()
@config_option
@user_errors
def status(config_path: Path | None) -> None:
    """Say whether the engine runs, with what, for how many clients."""
    from voicecli.engine.handle import EngineHandle

    handle = EngineHandle(settings_from(config_path))
    info = handle.probe()
    if info is None:
        display.out.print(f"No voicecli engine is running ({handle.socket}).", markup=False)
        return
    _print_status(info.details or {}, handle.socket)


@engine.command()
@config_option
@user_errors
def stop(config_path: Path | None) -> None:
    """Stop the engine (its clients finish their turns in-process)."""
    from voicecli.engine.handle import EngineHandle

    stopped = EngineHandle(settings_from(config_path)).stop()
    if stopped is None:
        display.out.print("No voicecli engine was running.", markup=False)
    elif stopped.answered:
        display.out.print(f"Stopped the voicecli engine (pid {stopped.pid}).", markup=False)
    else:
        display.out.print(
            f"Stopped the voicecli engine (pid {stopped.pid}), which did not answer.",
            markup=False,
        )


@engine.command(hidden=True)
@_with_engine_options
@click.option(
    "--identity",
    "identity_record",
    help="What the engine speaks with, as its clients ask for it (JSON): it overrides "
    "the model, language and decoder settings.",
)
@click.option("--llm-nice", type=click.IntRange(0, 19), help="The embedded LLM's niceness.")
@user_errors
def run(config_path: Path | None, identity_record: str | None, **flags: Any) -> None:
    """Be the engine, in the foreground (what `start` runs in the background)."""
    import json

    from voicecli.engine.host import run_engine
    from voicecli.engine.identity import EngineIdentity

    settings = settings_from(config_path, **flags)
    if identity_record is not None:
        try:
            identity = EngineIdentity.reported(json.loads(identity_record))
        except ValueError:
            identity = None
        if identity is None:
            raise VoiceCliError("--identity is not an engine identity of this voicecli.")
        settings = identity.apply(settings)
    run_engine(settings)


def _print_status(details: dict[str, Any], socket: Path) -> None:
    ident = details.get("identity", {})
    lines = [
        f"voicecli engine: pid {details.get('pid')}, {details.get('state')}, "
        f"{details.get('clients', 0)} client(s)",
        f"  socket   {socket}",
        f"  model    {ident.get('model_dir') or 'hexgrad/Kokoro-82M (hub)'}, "
        f"language {ident.get('lang')}",
        f"  LLM      {'loaded' if details.get('llm') else 'not loaded (starts with chat)'}",
        f"  memory   {details.get('rss_mb')} MB; up {details.get('uptime')} s; "
        + (
            "stays until stopped (it serves the API)"
            if details.get("http")
            else f"exits after {details.get('idle_exit'):g} s idle"
        ),
    ]
    if details.get("http"):
        lines.append(f"  API      http://{details['http']}/v1 (OpenAI's audio API)")
    for line in lines:
        display.out.print(line, markup=False)
