"""The LLM a conversation streams its replies from (``contract.LLM``): an OpenAI-compatible
server (``openai_chat``), the embedded model in this process (``embedded``) or in the
resident engine (``engine_hosted``), chosen from the settings by ``open.open_llm``."""
