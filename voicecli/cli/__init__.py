"""The ``voicecli`` command. Nothing in the library imports this package: it is
the entry point, and the commands in it only parse options and call the library."""

from __future__ import annotations

import logging
import os
import sys

import click

from voicecli import __version__
from voicecli.cli import commands
from voicecli.cli.bench import bench
from voicecli.cli.engine_commands import engine


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="voicecli")
def cli() -> None:
    """A voice assistant that starts speaking while the LLM is still writing."""


for command in (
    commands.say,
    commands.chat,
    commands.serve,
    commands.web,
    commands.mcp,
    commands.voices,
    commands.devices,
    commands.import_weights,
    commands.transcribe,
    bench,
    engine,
):
    cli.add_command(command)


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
