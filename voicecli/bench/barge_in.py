"""``voicecli bench barge-in``: talking over a reply played on speakers, measured at the
devices.

A virtual room (``bench/room.py``): the assistant's replies play on its speakers and
reach its microphone as a room's echo; the user's utterances (Kokoro in another voice)
are played into the microphone by a player of their own, whose DAC timestamps say when
each one's first sound is there. Everything between is what ``chat --listen`` runs: the
session and its player (the resident engine unless settings say otherwise), WebRTC's
echo canceller fed with what the player played, Silero VAD, the turn detector, Whisper.

1. False barge-ins: replies play for ``minutes`` with nobody speaking. Every turn the
   input confirms is a false barge-in, and every reply held at a speech onset that then
   went on is a stutter the user hears.
2. Barge-in reaction, ``trials`` times: the user speaks 1.5 to 3 s into a reply. From the
   first sample of the user's speech at the microphone's device to the reply's last
   sample at the speakers' device (held at the speech's first frame, cut once it is a
   turn), and the cut itself.
3. What was heard of each barge-in, and its word error rate (jiwer) against what was said.

The echo's level against the user's is measured, not assumed: the microphone's level
while replies play alone, against the utterances' own level.
"""

from __future__ import annotations

import queue
import random
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import numpy as np

from voicecli.bench.metrics import stats
from voicecli.bench.room import USER_VOICE, VirtualRoom, speak_as_user
from voicecli.bench.wer import wer
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.frames import InputFailed, UserTurn
from voicecli.listen.mic import level_db
from voicecli.pipeline import TurnResult
from voicecli.sources import text_source

# What people say to stop an assistant: short, and some of them no question.
INTERRUPTIONS = [
    "Wait, stop for a second.",
    "Sorry, can you say that again?",
    "Hold on, I have a question.",
    "Actually, tell me about the weather instead.",
    "No, that is not what I asked.",
]
REPLY = (
    "The history of the bicycle goes back to the early nineteenth century, when a German "
    "inventor built a running machine with two wheels and no pedals. Riders pushed it "
    "along with their feet, and it became a fashion in the cities of Europe for a few "
    "years. Pedals came decades later, fixed to the front wheel, and the front wheel grew "
    "larger and larger to go faster, until the safety bicycle brought back two wheels of "
    "the same size, driven by a chain. Pneumatic tyres made the ride smooth, and within a "
    "few years millions of people rode to work, to school and into the countryside."
)
LEAD = (1.5, 3.0)  # seconds into a reply's sound when the user starts speaking
TRIAL_TIMEOUT = 20.0


class _Recorder:
    """The barge-in ``chat --listen`` makes, with the time of each call."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.events: list[tuple[str, float]] = []

    def onset(self) -> None:
        self.events.append(("onset", time.monotonic()))
        self.inner.onset()

    def confirmed(self) -> None:
        self.events.append(("confirmed", time.monotonic()))
        self.inner.confirmed()

    def dropped(self) -> None:
        self.events.append(("dropped", time.monotonic()))
        self.inner.dropped()

    def count(self, name: str, since: float) -> int:
        return sum(1 for n, at in self.events if n == name and at >= since)

    def first(self, name: str, since: float) -> float | None:
        return next((at for n, at in self.events if n == name and at >= since), None)


class _Speakers:
    """What the speakers played (a sink monitor): the canceller's far end, and a log of
    which blocks carried sound, by the time they reached the device."""

    def __init__(self, played: Callable[[np.ndarray, float], None], rate: int) -> None:
        self.played = played
        self.rate = rate
        self.blocks: deque[tuple[float, float, bool]] = deque(maxlen=200_000)
        self._since = float("inf")
        self.first_sound: float | None = None  # the first block with sound since ``watch``

    def watch(self, since: float) -> None:
        self._since, self.first_sound = since, None

    def __call__(self, block: np.ndarray, at: float) -> None:
        self.played(block, at)
        loud = bool(np.any(block))
        self.blocks.append((at, at + len(block) / self.rate, loud))
        if loud and self.first_sound is None and at >= self._since:
            self.first_sound = at

    def sounding(self, since: float, until: float) -> float:
        """Seconds of sound played between the two times."""
        return sum(end - at for at, end, loud in list(self.blocks) if loud and since <= at < until)

    def last_sound(self, since: float) -> float | None:
        """When the last block with sound after ``since`` ended."""
        ends = [end for at, end, loud in list(self.blocks) if loud and at >= since]
        return max(ends) if ends else None


class _BargeInRig:
    """The room, the session and the voice input, wired as ``chat --listen`` wires them."""

    def __init__(self, settings: Settings, room: VirtualRoom, transcriber: Any) -> None:
        from voicecli.listen.echo import EchoCanceller
        from voicecli.listen.mic import Microphone
        from voicecli.listen.user_input import ReplyBargeIn
        from voicecli.listen.voice_input import VoiceInput

        self.closing = ExitStack()
        try:
            self.user, self.session = room.mouth_and_speakers(settings, self.closing)
            with room.entered():
                sink = self.session.sink
                if sink is None or not sink.capabilities.monitor:
                    raise VoiceCliError("The barge-in bench plays on a device: drop --no-play.")
                rate = self.session.synth.sample_rate
                self.echo = EchoCanceller(rate)
                self.speakers = _Speakers(self.echo.played, rate)
                sink.monitor(self.speakers)
                self.closing.callback(sink.monitor, None)
                self.recorder = _Recorder(ReplyBargeIn(self.session))
                self.levels: list[float] = []
                self.voice = VoiceInput(
                    transcriber,
                    _LevelTap(Microphone(), self.levels),
                    hangover=settings.listen_hangover,
                    max_seconds=settings.max_utterance,
                    barge_in=self.recorder,
                    echo=self.echo,
                )
                self.closing.callback(self.voice.close)
        except BaseException:
            self.closing.close()
            raise

    def close(self) -> None:
        self.closing.close()

    def reply(self) -> TurnResult:
        return self.session.speak(lambda cancel, tl: text_source([REPLY], tl), label="reply")

    def transcripts(self, timeout: float) -> list[str]:
        """What the voice input made of the user, waiting up to ``timeout`` for the
        first of it."""
        texts: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                item = self.voice.events.get(timeout=max(0.0, left)) if left > 0 else None
            except queue.Empty:
                item = None
            if item is None:
                if left <= 0 or texts:
                    return texts
                continue
            match item:
                case UserTurn(text=text):
                    texts.append(text)
                case InputFailed(message=message):
                    texts.append(f"({message})")
            deadline = time.monotonic()  # take what else is there, then stop

    def quiet(self, minutes: float, progress: Callable[[str], None]) -> dict[str, Any]:
        """Replies with nobody speaking, for ``minutes`` of their sound."""
        began = time.monotonic()
        played, replies, cut = 0.0, 0, 0
        first: float | None = None
        converged: float | None = None
        echo_levels: list[float] = []
        while played < minutes * 60.0:
            start = time.monotonic()
            self.speakers.watch(start)
            self.levels.clear()
            result = self.reply()
            replies += 1
            cut += result.interrupted
            time.sleep(0.3)  # the last block's way to the device
            played += self.speakers.sounding(start, time.monotonic())
            first = first if first is not None else self.speakers.first_sound
            converged = self.echo.converged_at
            echo_levels += [level for level in self.levels if level > -70]
            progress(f"{played / 60:.1f} of {minutes:g} min of replies, nobody speaking")
        heard = self.transcripts(timeout=1.5)  # a turn begun at the end has ended by then
        false = self.recorder.count("confirmed", began)
        return {
            "replies": replies,
            "assistant_seconds": round(played, 1),
            "false_barge_ins": false,
            "false_per_5_min": round(false * 300.0 / played, 2) if played else None,
            "replies_cut": cut,
            "holds": self.recorder.count("onset", began),  # paused, then went on
            "heard_while_quiet": heard,
            "echo_db": statistics.median(echo_levels) if echo_levels else -100.0,
            "canceller_converged": self.echo.converged,
            "first_sound_to_converged_s": (
                round(converged - first, 1) if converged and first else None
            ),
        }

    def trial(self, speech: np.ndarray, lead: float, index: int) -> dict[str, Any]:
        """A reply, and the user talking over it ``lead`` seconds into its sound."""
        from voicecli.frames import AudioChunk

        self.transcripts(timeout=0.0)
        spoke: list[float] = []
        self.user.begin_turn(lambda sentence, at: spoke.append(at), None)
        results: list[TurnResult] = []
        began = time.monotonic()
        self.speakers.watch(began)
        turn = threading.Thread(target=lambda: results.append(self.reply()), daemon=True)
        turn.start()
        while True:
            first = self.speakers.first_sound
            if first is not None and time.monotonic() >= first + lead:
                break
            if time.monotonic() > began + TRIAL_TIMEOUT:
                raise VoiceCliError("The reply did not start playing within 20 s.")
            time.sleep(0.01)
        self.user.write(AudioChunk(index, speech, last=True))
        turn.join(TRIAL_TIMEOUT)
        heard = self.transcripts(timeout=10.0)
        self.user.drain()
        cut = bool(results) and results[0].interrupted
        silent = self.speakers.last_sound(began)
        onset = spoke[0] if spoke else None
        held = next(
            (at for name, at in self.recorder.events if name == "onset" and at >= began), None
        )
        return {
            "lead_s": round(lead, 2),
            "cut": cut,
            "reaction_ms": round((silent - onset) * 1000) if cut and onset and silent else None,
            "held_ms": round((held - onset) * 1000) if held and onset else None,
            "heard": " ".join(heard),
        }


def run_barge_in(
    settings: Settings, *, minutes: float, trials: int, progress: Callable[[str], None]
) -> dict[str, Any]:
    from voicecli.listen.asr import Transcriber

    progress(f"speaking {len(INTERRUPTIONS)} interruptions in the voice {USER_VOICE}")
    said = speak_as_user(settings, INTERRUPTIONS)
    user_db = _speech_level(said)
    transcriber = Transcriber(settings.asr_model)
    room = VirtualRoom()
    try:
        room.echo()
        rig = _BargeInRig(settings, room, transcriber)
        try:
            quiet = rig.quiet(minutes, progress)
            quiet["echo_vs_user_db"] = round(quiet.pop("echo_db") - user_db, 1)
            rows = []
            rng = random.Random(0)
            for i in range(trials):
                row = rig.trial(said[i % len(said)], rng.uniform(*LEAD), i)
                row["said"] = INTERRUPTIONS[i % len(said)]
                row["wer"] = round(wer([row["said"]], [row["heard"]]), 3)
                rows.append(row)
                progress(
                    f"barge-in {i + 1}/{trials}: reply silent {row['reaction_ms']} ms after "
                    f"the speech began; heard {row['heard']!r}"
                )
        finally:
            rig.close()
    finally:
        room.close()
    reactions = [r["reaction_ms"] for r in rows if r["reaction_ms"] is not None]
    return {
        "settings": {
            "voice": settings.voice,
            "user_voice": USER_VOICE,
            "hangover": settings.listen_hangover,
            "asr_model": settings.asr_model,
            "engine": settings.engine,
        },
        "quiet": quiet,
        "trials": rows,
        "reaction_ms": stats(reactions) if reactions else None,
        "reaction_p90_ms": float(np.percentile(reactions, 90)) if reactions else None,
        "missed": sum(r["reaction_ms"] is None for r in rows),
        "wer": round(wer([r["said"] for r in rows], [r["heard"] for r in rows]), 3)
        if rows
        else None,
    }


class _LevelTap:
    """The microphone, with the level of every frame kept (the echo's level)."""

    def __init__(self, mic: Any, levels: list[float]) -> None:
        self.mic = mic
        self.levels = levels
        self.name = mic.name

    @property
    def dropped(self) -> int:
        return self.mic.dropped

    def read(self, timeout: float = 0.5):  # noqa: ANN201
        frame = self.mic.read(timeout)
        if frame is not None:
            self.levels.append(frame.level_db)
        return frame

    def close(self) -> None:
        self.mic.close()


def _speech_level(said: list[np.ndarray]) -> float:
    """The median level of frames with sound, as long as a hearing frame (at 24 kHz), as
    the echo's is taken."""
    frame = 768
    levels = [level_db(a[i : i + frame]) for a in said for i in range(0, len(a) - frame + 1, frame)]
    return statistics.median(level for level in levels if level > -70)


def report_lines(result: dict[str, Any]) -> list[str]:
    quiet = result["quiet"]
    lines = [
        "voicecli bench barge-in: replies on speakers whose echo reaches the microphone "
        f"({quiet['echo_vs_user_db']:+.1f} dB against the user), echo cancelled",
        f"  nobody speaking: {quiet['assistant_seconds'] / 60:.1f} min of replies, "
        f"{quiet['false_barge_ins']} false barge-ins "
        f"({quiet['false_per_5_min']} per 5 min), {quiet['holds']} holds that went on",
    ]
    if quiet["first_sound_to_converged_s"] is not None:
        lines.append(
            f"  the canceller learnt the room {quiet['first_sound_to_converged_s']} s into "
            "the first reply (the microphone is muted while replies play until then)"
        )
    reaction = result["reaction_ms"]
    n = len(result["trials"])
    if reaction:
        lines.append(
            f"  barge-in, speech onset -> reply silent at the device: "
            f"{reaction['median']:.0f} ms p50, {result['reaction_p90_ms']:.0f} ms p90 "
            f"({n - result['missed']} of {n} cut)"
        )
    if result["wer"] is not None:
        lines.append(f"  what was heard of the barge-ins: WER {result['wer']:.1%}")
    return lines


def write(result: dict[str, Any], output_dir: Any) -> Any:
    from voicecli.bench import report

    return report.write_json(result, output_dir / "barge-in.json")
