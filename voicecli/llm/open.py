"""Which LLM answers, from the settings: the one place that decides, for ``chat``,
``web``, ``mcp`` and the benches alike."""

from __future__ import annotations

from voicecli.config import LLMChoice, Settings
from voicecli.errors import VoiceCliError
from voicecli.llm.contract import LLM
from voicecli.llm.discover import Found, discover, parse_servers, pick_model
from voicecli.llm.openai_chat import OpenAIChat

OPENAI_MODEL = "gpt-4o-mini"  # on OpenAI itself, unless the settings name another


def uses_embedded_llm(settings: Settings) -> bool:
    """Whether the embedded model is the one asked for, or the fallback: no server or key
    configured (``open_llm`` looks for a server on this machine first)."""
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


def find_local_server(settings: Settings) -> Found | None:
    """An OpenAI-compatible server on this machine, for ``llm = auto`` with neither a
    base URL nor a key; None if none answers (or none is to be looked for)."""
    if settings.llm != LLMChoice.AUTO or settings.base_url or settings.api_key:
        return None
    servers = parse_servers(settings.llm_servers)
    return discover(servers) if servers else None


def open_llm(settings: Settings, *, max_retries: int = 1) -> LLM:
    """The configured server; else one found on this machine; else the embedded model,
    the resident engine's when there is one (shared by every terminal), otherwise
    launched here at once, so that it loads while the caller loads speech. ``ready()``
    waits for it; ``close()`` ends what this opened."""
    options = {
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
        "timeout": settings.llm_timeout,
        "max_retries": max_retries,
    }
    if not uses_embedded_llm(settings):
        return OpenAIChat(
            base_url=settings.base_url,
            api_key=settings.api_key,
            model=settings.model or OPENAI_MODEL,
            **options,
        )
    found = find_local_server(settings)
    if found is not None:
        model = pick_model(found.models, settings.model)
        return OpenAIChat(
            base_url=found.server.base_url,
            api_key=None,
            model=model,
            where=f"{found.server.name} at {found.server.address}",
            **options,
        )
    if settings.engine:
        from voicecli.llm.engine_hosted import EngineLLM

        return EngineLLM(settings, max_retries=max_retries)
    from voicecli.llm.embedded import EmbeddedLLM

    return EmbeddedLLM(settings, max_retries=max_retries)
