"""``voicecli mcp``: an MCP server over stdio (the official ``mcp`` SDK) whose tools
speak and listen for an agent: ``speak``, ``converse``, ``listen`` and ``stop``, each a
call on ``AgentVoice``. A user's mistake or a missing part (no microphone, no speech
before the timeout, an unknown voice) is a tool error in one line, for the agent to
read; the SDK keeps the protocol's stdout apart from everything else.
"""

from __future__ import annotations

import logging
from typing import Any

from voicecli.agent_voice import AgentVoice
from voicecli.config import Settings
from voicecli.errors import VoiceCliError

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "voicecli speaks aloud on the user's machine and hears the user's answer. Use "
    "`converse` to say something and hear the reply (the user may talk over you: the "
    "result says what they heard), `speak` to say something without waiting for an "
    "answer, `listen` to hear the user, and `stop` to fall silent at once. Keep what you "
    "say short and spoken: no markdown, no lists."
)
DEFAULT_TIMEOUT = 30.0


def build_server(agent: AgentVoice) -> Any:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("voicecli", instructions=INSTRUCTIONS)

    def tool_errors(call: Any) -> Any:
        try:
            return call()
        except VoiceCliError as exc:
            raise ToolError(str(exc)) from None

    @server.tool()
    def speak(text: str, voice: str | None = None, wait: bool = True) -> dict[str, Any]:
        """Say `text` aloud (in `voice`, a Kokoro voice or blend, for this call).
        With `wait` (the default) it returns once the text has been heard, and says
        whether the user cut it short; otherwise at once, speaking on."""
        spoken = tool_errors(lambda: agent.speak(text, voice, wait))
        if spoken is None:
            return {"speaking": True}
        return {"heard": spoken.heard, "interrupted": spoken.interrupted}

    @server.tool()
    def converse(
        text: str, listen: bool = True, timeout: float = DEFAULT_TIMEOUT
    ) -> dict[str, Any]:
        """Say `text` aloud, then listen for the user's answer (up to `timeout` seconds
        of silence) and return its transcript. If the user talked over you, `heard` is
        what they heard of `text`, and `interrupted` is true."""
        spoken, answer = tool_errors(lambda: agent.converse(text, listen, timeout))
        result: dict[str, Any] = {"heard": spoken.heard, "interrupted": spoken.interrupted}
        if answer is not None:
            result["transcript"] = answer.text
        return result

    @server.tool()
    def listen(timeout: float = DEFAULT_TIMEOUT) -> dict[str, Any]:
        """Listen for the user (up to `timeout` seconds of silence) and return what they
        said."""
        heard = tool_errors(lambda: agent.listen(timeout))
        return {"transcript": heard.text, "seconds": round(heard.seconds, 2)}

    @server.tool()
    def stop() -> dict[str, Any]:
        """Fall silent at once: whatever is being said stops."""
        return {"stopped": agent.stop()}

    return server


def run_mcp(settings: Settings) -> None:
    """Serve the tools on stdin and stdout until the client goes."""
    agent = AgentVoice(settings)
    try:
        build_server(agent).run("stdio")
    finally:
        agent.close()
