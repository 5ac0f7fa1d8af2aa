"""`voicecli chat` on the embedded LLM: a real llama.cpp server, started and stopped by voicecli."""

from __future__ import annotations

import importlib.util
import os

import pytest
from click.testing import CliRunner

from tests.wavfile import read_wav
from voicecli.cli import cli

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("xllamacpp") is None,
    reason="xllamacpp is not installed: ./install.sh",
)


def llama_servers() -> set[int]:
    """The embedded LLM servers this process started (other workers start their own)."""
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state, parent = f.read().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if b"voicecli.llm.embedded_process" in cmd and state != "Z" and int(parent) == os.getpid():
            pids.add(int(entry))
    return pids


def test_chat_once_on_the_embedded_llm_speaks_and_leaves_no_server(tiny_model_dir, tmp_path):
    before = llama_servers()
    out = tmp_path / "reply.wav"
    result = CliRunner().invoke(
        cli,
        [
            "chat",
            "--llm",
            "local",
            "--model-dir",
            str(tiny_model_dir),
            "--voice",
            "af_tiny",
            "-o",
            str(out),
            "--max-tokens",
            "24",
            "--once",
            "Say hello in one sentence.",
        ],
        catch_exceptions=False,
        # Niceness 0: at voicecli's 10, beside four busy test workers, llama.cpp got so
        # little CPU that this test took 90 s (its niceness is tested in test_cli.py).
        env={"OPENAI_API_KEY": "set-but-ignored", "VOICECLI_LLM_NICE": "0"},
    )
    assert result.exit_code == 0, result.output
    assert "embedded" in result.output  # says which LLM is in use
    assert read_wav(out)[0].size > 0, "the embedded model's reply was not spoken"
    assert llama_servers() - before == set(), "the embedded server outlived the chat"


def test_missing_gguf_is_a_clear_error(tiny_model_dir, tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "chat",
            "--llm",
            "local",
            "--llm-model-path",
            str(tmp_path / "nope.gguf"),
            "--model-dir",
            str(tiny_model_dir),
            "--voice",
            "af_tiny",
            "-o",
            str(tmp_path / "x.wav"),
            "--once",
            "Hi",
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 1
    assert "nope.gguf" in result.output and "--llm-model-path" in result.output
