"""What a resident engine speaks with, as one object: what a command's settings need of
it, how it is started with that (``argv``, ``environment``), what it reports of itself
(``record``) and the check between the two. A voice, a speed or an output file belongs
to each request; the model, its language and the decoder's settings belong to the
engine, so an engine started with others never speaks for these settings."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from voicecli import __version__
from voicecli.config import Precision, Settings, Synthesis
from voicecli.tts.voices import VoiceSpec

IDENTITY_FLAG = "--identity"


def _resolved(path: Path | None) -> str | None:
    return str(Path(path).expanduser().resolve()) if path else None


@dataclass(frozen=True)
class EngineIdentity:
    model_dir: str | None
    lang: str
    synthesis: str
    precision: str
    synth_threads: int | None
    llm_model_path: str | None
    llm_threads: int | None
    voicecli: str = __version__

    @classmethod
    def of(cls, settings: Settings) -> EngineIdentity:
        return cls(
            model_dir=_resolved(settings.model_dir),
            lang=(settings.lang or VoiceSpec.parse(settings.voice).lang_code).lower(),
            synthesis=Synthesis(settings.synthesis).value,
            precision=Precision(settings.synth_precision).value,
            synth_threads=settings.synth_threads,
            llm_model_path=_resolved(settings.llm_model_path),
            llm_threads=settings.llm_threads,
        )

    def record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def reported(cls, record: Any) -> EngineIdentity | None:
        """The identity an engine reports (``record``); None if it is not one of ours."""
        if not isinstance(record, Mapping):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        if set(record) != names:
            return None
        try:
            return cls(**record)
        except TypeError:
            return None

    def apply(self, settings: Settings) -> Settings:
        """``settings`` with this identity's (the engine's side of ``argv``)."""
        return dataclasses.replace(
            settings,
            model_dir=Path(self.model_dir) if self.model_dir else None,
            lang=self.lang,
            synthesis=Synthesis(self.synthesis),
            synth_precision=Precision(self.precision),
            synth_threads=self.synth_threads,
            llm_model_path=Path(self.llm_model_path) if self.llm_model_path else None,
            llm_threads=self.llm_threads,
        )

    def argv(self, settings: Settings) -> list[str]:
        """``voicecli engine run`` with this identity, and the settings that are the
        engine's own but no part of who it is (its default voice, idle time, the LLM's
        niceness)."""
        http = (
            ["--http", str(settings.engine_http), "--http-host", settings.engine_http_host]
            if settings.engine_http is not None
            else []
        )
        return [
            sys.executable, "-m", "voicecli", "engine", "run",
            IDENTITY_FLAG, json.dumps(self.record()),
            "--voice", settings.voice,
            "--idle", f"{settings.engine_idle:g}",
            "--llm-nice", str(settings.llm_nice),
            *http,
        ]  # fmt: skip

    @staticmethod
    def environment(runtime: Path, settings: Settings) -> dict[str, str]:
        """Its environment: the key of its HTTP face goes here, not in its argv, which
        every user of the machine may read."""
        env = {**os.environ, "VOICECLI_RUNTIME_DIR": str(runtime)}
        if settings.server_key:
            env["VOICECLI_SERVER_KEY"] = settings.server_key
        return env

    def describe(self) -> str:
        model = self.model_dir or "hexgrad/Kokoro-82M from the hub"
        return f"model {model}, language {self.lang}, voicecli {self.voicecli}"


def describe_record(record: Any) -> str:
    """An engine's report of itself, in words, whether or not it is one of ours."""
    identity = EngineIdentity.reported(record)
    return identity.describe() if identity is not None else "an identity this voicecli cannot read"
