"""Which LLM answers, from the settings: the one place that decides, for ``chat``,
``web`` and the benches alike."""

from __future__ import annotations

from voicecli.config import LLMChoice, Settings
from voicecli.errors import VoiceCliError
from voicecli.llm.contract import LLM
from voicecli.llm.openai_chat import OpenAIChat


def uses_embedded_llm(settings: Settings) -> bool:
    """Whether the embedded model answers: asked for, or no server or key configured."""
    if settings.llm == LLMChoice.LOCAL or (
        settings.llm == LLMChoice.AUTO and not settings.base_url and not settings.api_key
    ):
        return True
    if not settings.base_url and not settings.api_key:
        raise VoiceCliError(
            "No LLM configured: set OPENAI_API_KEY or --base-url, "
            "or use --llm local for the embedded model."
        )
    return False


def open_llm(settings: Settings, *, max_retries: int = 1) -> LLM:
    """The configured server; else the embedded model, the resident engine's when there
    is one (shared by every terminal), otherwise launched here at once, so that it loads
    while the caller loads speech. ``ready()`` waits for it; ``close()`` ends what this
    opened."""
    if not uses_embedded_llm(settings):
        return OpenAIChat(
            base_url=settings.base_url,
            api_key=settings.api_key,
            model=settings.model,
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            timeout=settings.llm_timeout,
            max_retries=max_retries,
        )
    if settings.engine:
        from voicecli.llm.engine_hosted import EngineLLM

        return EngineLLM(settings, max_retries=max_retries)
    from voicecli.llm.embedded import EmbeddedLLM

    return EmbeddedLLM(settings, max_retries=max_retries)
