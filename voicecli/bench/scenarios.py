"""Built-in replies for ``voicecli bench``, and how a reply becomes a scripted LLM stream.

A reply may hold pause markers, ``[[pause 2.5]]``: the scripted LLM stops for that
many seconds before the next token, as a real agent does while a tool call or a
retrieval step runs. Markers are not part of the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from voicecli.bench.scripted_llm import Script, tokenize
from voicecli.errors import VoiceCliError

PAUSE = re.compile(r"\[\[\s*pause\s+([0-9]*\.?[0-9]+)\s*\]\]", re.IGNORECASE)
MAX_PAUSE = 60.0  # seconds: a longer pause is a typo, and would stall the bench


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    source: str  # the reply, with optional pause markers


@dataclass(frozen=True)
class ScriptedReply:
    """A reply split into LLM tokens, with the pauses placed before token indices."""

    text: str  # without markers: what the LLM "writes"
    tokens: list[str]
    pauses: dict[int, float] = field(default_factory=dict)

    def script(self, tokens_per_second: float) -> Script:
        return Script(
            list(self.tokens), token_interval=1.0 / tokens_per_second, pauses=dict(self.pauses)
        )

    def token_times(self, tokens_per_second: float) -> list[float]:
        """When each token leaves the scripted LLM, in seconds after the request."""
        times, t = [], 0.0
        for i in range(len(self.tokens)):
            t += 1.0 / tokens_per_second + self.pauses.get(i, 0.0)
            times.append(t)
        return times


def parse_reply(source: str) -> ScriptedReply:
    tokens: list[str] = []
    pauses: dict[int, float] = {}
    pos = 0
    for marker in PAUSE.finditer(source):
        tokens += tokenize(source[pos : marker.start()])
        seconds = float(marker.group(1))
        if seconds > MAX_PAUSE:
            raise VoiceCliError(
                f"Pause of {seconds:g} s in the reply is too long: use at most {MAX_PAUSE:g} s."
            )
        pauses[len(tokens)] = pauses.get(len(tokens), 0.0) + seconds
        pos = marker.end()
    tokens += tokenize(source[pos:])
    if not "".join(tokens).strip():
        raise VoiceCliError("The bench reply is empty: give a text file with words in it.")
    # A pause after the last token delays nothing the listener hears: drop it.
    pauses = {i: s for i, s in pauses.items() if i < len(tokens)}
    return ScriptedReply("".join(tokens), tokens, pauses)


def load_text_file(path: Path) -> ScriptedReply:
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise VoiceCliError(f"Cannot read the bench text file {path}: {exc}.") from None
    return parse_reply(source)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "short",
            "one sentence",
            (
                "The capital of Australia is Canberra, which was chosen as a compromise between "
                "Sydney and Melbourne."
            ),
        ),
        Scenario(
            "medium",
            "five sentences",
            (
                "Sure, I can help you with that. First, open the settings page from the menu in "
                "the top right corner. Then choose the network tab and look for the proxy section. "
                "Turn off the option that says use system proxy, and save your changes. After you "
                "restart the app, the connection error should be gone."
            ),
        ),
        Scenario(
            "long",
            "24 sentences with markdown: headings, bold, lists",
            (
                "Here is a plan for your trip to Lisbon over three days.\n\n"
                "## Day one: the old town\n\n"
                "Start early in **Alfama**, the oldest district of the city. The narrow streets "
                "are quiet before nine, and the light on the river is beautiful. Walk up to the "
                "castle for the view, and buy tickets online to skip the queue. For lunch, look "
                "for a small tasca with grilled sardines on the menu. In the afternoon, take tram "
                "28 through Graça and Estrela. It gets crowded, so board at the first stop.\n\n"
                "## Day two: Belém\n\n"
                "Take the train from Cais do Sodré to Belém, which takes about ten minutes. "
                "Visit these in order:\n\n"
                "1. The Jerónimos Monastery, which opens at ten.\n"
                "2. The Tower of Belém, a short walk along the water.\n"
                "3. The Monument to the Discoveries, with a lift to the top.\n\n"
                "Do not leave without trying the custard tarts at the old bakery nearby. The line "
                "moves fast, even when it looks long. In the evening, head back to Bairro Alto for "
                "dinner. Many restaurants there play fado after nine.\n\n"
                "## Day three: Sintra\n\n"
                "Sintra is forty minutes away by train from Rossio station. The palaces are spread "
                "over a hill, so wear good shoes. Here is what to pack:\n\n"
                "- water and a light jacket, since the hills are cooler,\n"
                "- a printed copy of your tickets,\n"
                "- some cash for the bus between the palaces.\n\n"
                "Pena Palace is the most famous, but Quinta da Regaleira is my favourite. Its "
                "initiation well is worth the visit on its own. Come back before sunset to avoid "
                "the evening rush. Enjoy your trip, and let me know if you want restaurant tips."
            ),
        ),
        Scenario(
            "pauses",
            "a tool call after the first sentence and a retrieval pause later",
            (
                "Let me check the forecast for you. [[pause 2.0]] Tomorrow in Lisbon it will be "
                "sunny, with a high of twenty four degrees. The wind will be light in the morning "
                "and stronger near the coast in the afternoon. I am also looking up your calendar. "
                "[[pause 1.5]] You have a meeting at ten, so an umbrella is not needed on the way. "
                "Have a good day."
            ),
        ),
    )
}


def scenario_reply(name: str) -> ScriptedReply:
    try:
        return parse_reply(SCENARIOS[name].source)
    except KeyError:
        raise VoiceCliError(
            f"Unknown scenario {name!r}: use one of {', '.join(SCENARIOS)}."
        ) from None
