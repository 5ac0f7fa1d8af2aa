"""``voicecli bench turn-taking``: where voice input ends the user's turn, measured.

Each question of ``HESITANT_QUESTIONS`` is spoken by Kokoro in fragments (a voice unlike the
assistant's), and the fragments are joined with the hesitations a speaker makes inside
a sentence (``PAUSES``, cycled). Each is then heard by the real Silero VAD and voicecli's
own turn detector and, for every hangover in ``HANGOVERS``:

* ``cut``: the questions cut in two or more turns (a pause taken for the end);
* ``wait``: how long after the speech ended the turn ended (the hangover's cost, paid on
  every turn).

The text cue is measured beside them: at a pause of at least the short hangover, the
words so far are transcribed, and the turn ends there only if they read as complete (a
final ``.``, ``?`` or ``!`` but no "...", and no trailing ``and``, ``so``...); otherwise it
waits for the long hangover. Whisper's transcription time is reported too: it adds to
the wait before the LLM is asked.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from voicecli.bench.metrics import stats
from voicecli.bench.room import speak_as_user
from voicecli.config import Settings
from voicecli.frames import Pausing, SpeechEvent, UserSpeech

# Questions as people say them, with the places where they hesitate.
HESITANT_QUESTIONS = [
    ["What is the capital of France,", "and why did it become the capital?"],
    ["Can you tell me", "how far the moon is from the earth?"],
    ["I was wondering", "if you could explain", "how rainbows form."],
    ["So my question is,", "what should I cook tonight?"],
    ["Tell me three facts about", "the ocean."],
    ["How long does it take", "to boil an egg?"],
    ["I need a word that means", "happy but more formal."],
    ["What's the weather like in", "London in April?"],
    ["Could you summarize", "the plot of Hamlet", "in two sentences?"],
    ["Why is the sky blue", "and not green?"],
    ["Remind me", "what time the meeting starts tomorrow."],
    ["If I plant tomatoes now,", "when can I pick them?"],
    ["Which is bigger,", "a blue whale or a dinosaur?"],
    ["Please explain", "how a bill becomes a law."],
    ["What should I read", "after finishing Dune?"],
    ["My sister asked me", "how to make bread without yeast."],
    ["Is it safe", "to drink water from a mountain stream?"],
    ["Could you give me", "a short recipe", "for pancakes?"],
    ["Where do", "the swallows go in winter?"],
    ["How many languages", "are spoken in India?"],
]
PAUSES = (0.3, 0.5, 0.7, 0.9, 0.4, 0.6)  # seconds, cycled over the hesitations
HANGOVERS = (0.3, 0.5, 0.8, 1.0, 1.2)
CUE = (0.5, 1.2)  # short and long hangover of the text cue
CONNECTIVES = frozenset(
    "and so but or because if that the a an to of with about like which who when".split()
)


@dataclass(frozen=True)
class Spoken:
    audio: np.ndarray  # 16 kHz
    probabilities: list[float]  # one per hearing frame
    pauses: list[float]  # seconds of each hesitation


def complete(text: str) -> bool:
    """Whether the words so far read as a finished sentence (Whisper writes a trailing
    "..." where the speaker trailed off)."""
    text = text.strip()
    last = re.findall(r"[a-z']+", text.lower())
    trailing = text.endswith(("...", "…"))
    return bool(last) and text[-1] in ".?!" and not trailing and last[-1] not in CONNECTIVES


def detected(spoken: Spoken, detector: Any) -> list[SpeechEvent]:
    """What the shipped turn detector makes of ``spoken``, event by event."""
    from voicecli.listen.vad import frames

    events = []
    for frame, probability in zip(frames(spoken.audio), spoken.probabilities, strict=True):
        events += detector.push(frame, probability)
    return events + detector.flush()


def run_turn_taking(
    settings: Settings, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    from voicecli.frames import HEARING_RATE
    from voicecli.listen.asr import Transcriber
    from voicecli.listen.vad import VoiceActivity, frames

    transcriber = Transcriber(settings.asr_model)
    said = iter(speak_as_user(settings, [fragment for q in HESITANT_QUESTIONS for fragment in q]))
    spoken: list[Spoken] = []
    pause_iter = iter(PAUSES * 10)
    for question in HESITANT_QUESTIONS:
        parts, pauses = [], []
        for i in range(len(question)):
            audio = next(said)
            # 24 kHz to 16 kHz: Kokoro's band ends well below 8 kHz.
            audio = np.interp(np.arange(0, len(audio), 1.5), np.arange(len(audio)), audio)
            if i:
                pauses.append(next(pause_iter))
                parts.append(np.zeros(round(pauses[-1] * HEARING_RATE), np.float32))
            parts.append(audio.astype(np.float32))
        silence = np.zeros(HEARING_RATE, np.float32)
        audio = np.concatenate([silence, *parts, silence, silence])
        vad = VoiceActivity()
        spoken.append(Spoken(audio, [vad(f) for f in frames(audio)], pauses))
        if progress:
            progress(f"spoke {' / '.join(question)}")

    from voicecli.listen.turns import TurnDetector

    results: dict[str, Any] = {
        "hangovers": {},
        "questions": HESITANT_QUESTIONS,
        "pauses": list(PAUSES),
    }
    for hangover in HANGOVERS:
        turns = [_turns_and_pauses(detected(s, TurnDetector(hangover=hangover)))[0] for s in spoken]
        cut = sum(len(found) > 1 for found in turns)
        results["hangovers"][f"{hangover:g}"] = {"cut": cut, "wait_ms": round(hangover * 1000)}

    # The cue decides at each pause of the short hangover (a Pausing of a detector whose
    # hangover is the long one); the last pause is the end of the question.
    cue_cut, cue_waits, asr_ms, checks = 0, [], [], []
    for s in spoken:
        found, pauses = _turns_and_pauses(detected(s, TurnDetector(hangover=CUE[1], early=CUE[0])))
        ended = len(found) > 1  # at a long pause
        finished = []
        for pause in pauses:
            began = time.perf_counter()
            text = transcriber.transcribe(pause.audio).text
            asr_ms.append((time.perf_counter() - began) * 1000)
            finished.append(complete(text))
            checks.append({"heard": text, "at_s": round(pause.end, 3)})
        cue_cut += ended or any(finished[:-1])
        cue_waits.append(CUE[0] * 1000 if finished and finished[-1] else CUE[1] * 1000)
    results["cue"] = {
        "short": CUE[0],
        "long": CUE[1],
        "cut": cue_cut,
        "wait_ms": stats(cue_waits),
        "checks": checks,  # what was transcribed at each pause
    }
    results["asr_ms"] = stats(asr_ms)
    results["questions_count"] = len(spoken)
    return results


def report_lines(result: dict[str, Any]) -> list[str]:
    n = result["questions_count"]
    lines = [
        f"voicecli bench turn-taking: {n} questions spoken with hesitations of "
        f"{', '.join(f'{p:g}' for p in result['pauses'])} s inside them",
        "  end of turn              questions cut   wait after the speech",
    ]
    for hangover, row in result["hangovers"].items():
        lines.append(
            f"  hangover {hangover:>4} s        {row['cut']:>3} of {n}       {row['wait_ms']} ms"
        )
    cue = result["cue"]
    lines.append(
        f"  text cue {cue['short']:g}/{cue['long']:g} s       {cue['cut']:>3} of {n}       "
        f"{cue['wait_ms']['median']:.0f} ms p50 ({len(cue['checks'])} transcriptions at pauses)"
    )
    asr = result["asr_ms"]
    lines.append(f"  Whisper per check: {asr['median']:.0f} ms p50, {asr['max']:.0f} max")
    return lines


def write(result: dict[str, Any], output_dir: Path) -> Path:
    from voicecli.bench import report

    return report.write_json(result, output_dir / "turn-taking.json")


def _turns_and_pauses(events: list[SpeechEvent]) -> tuple[list[UserSpeech], list[UserSpeech]]:
    """The turns a detector found, and the speech at each pause it handed on."""
    turns: list[UserSpeech] = []
    pauses: list[UserSpeech] = []
    for event in events:
        match event:
            case UserSpeech():
                turns.append(event)
            case Pausing(speech=speech):
                pauses.append(speech)
    return turns, pauses
