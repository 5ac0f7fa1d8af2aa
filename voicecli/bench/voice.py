"""``voicecli bench listen``: voice in, from the end of the user's speech to the reply's
first sound, stage by stage.

1. **Transcription.** ``SENTENCES`` (20 of our own) spoken by eSpeak NG, a voice unlike
   Kokoro's, written as WAV files and given to ``voicecli transcribe`` (the command
   itself, in a process of its own): word error rate against what was written.
2. **Voice to voice.** Questions spoken by Kokoro in ``USER_VOICE`` are played into a
   virtual microphone (``bench/room.py``) by a player of their own, whose DAC timestamps
   say when each one's speech ends at the microphone's device. ``chat --listen``'s own
   input hears them (``listening.UserInput``: the echo canceller, Silero VAD, the turn
   detector, Whisper, barge-in, as on speakers by default). The reply comes from the scripted
   LLM at ``--tokens-per-second`` (or the embedded model, ``--llm local``), the same reply
   to every question (``--scenario``), through the session and its player (the resident
   engine unless the settings say otherwise). Each question is asked twice in a row,
   the reply begun early (at the pause, ``early_reply``) and then at the end of the turn.
   Per turn, after the end of the speech: the VAD's end of speech, the end of the turn,
   the transcript, the request, the first token, and the first sound at the speakers'
   device."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from voicecli.bench.metrics import stats
from voicecli.bench.room import USER_VOICE, VirtualRoom, speak_as_user
from voicecli.bench.scenarios import ScriptedReply
from voicecli.bench.wer import wer
from voicecli.config import Settings
from voicecli.errors import VoiceCliError

# What people ask a voice assistant, written for this bench.
SENTENCES = [
    "Please turn off the lights in the kitchen before you go to bed.",
    "The train to the airport leaves every twenty minutes.",
    "Can you remind me to call my mother tomorrow morning?",
    "I would like a cup of coffee with a little milk.",
    "The weather will be cold and windy on the coast this weekend.",
    "How long does it take to walk to the nearest station?",
    "She planted roses and tulips along the garden fence.",
    "What is the difference between a lake and a pond?",
    "Our meeting has been moved to the afternoon.",
    "Read me the first chapter of the book again.",
    "The museum is closed on Mondays but open late on Fridays.",
    "Why do cats sleep so much during the day?",
    "Add eggs, butter and bread to my shopping list.",
    "The children built a snowman in the park after school.",
    "Tell me a short story about a dragon who loves music.",
    "My phone battery runs out faster than it used to.",
    "Is it going to rain in the mountains tonight?",
    "He forgot his umbrella on the bus this morning.",
    "Which planet is closest to the sun?",
    "Let us practice a few phrases in Spanish before the trip.",
]
SPOKEN_QUESTIONS = [
    "What is the capital of France?",
    "How far is the moon from the earth?",
    "Can you explain how rainbows form?",
    "What should I cook tonight?",
    "How long does it take to boil an egg?",
    "Why is the sky blue?",
    "Which is bigger, a blue whale or a dinosaur?",
    "How many languages are spoken in India?",
    "Where do swallows go in winter?",
    "Is it safe to drink water from a mountain stream?",
]
HEARD_TIMEOUT = 20.0  # seconds after the speech ended for its transcript
BETWEEN_QUESTIONS = 0.8  # seconds between turns: the muted microphone's echo tail, and a breath

# How the reply is begun: at a pause, on what was said so far (``early_reply``), or once
# the hangover has ended the turn.
REPLY_TIMES = ("early", "end of turn")
VOICE_STAGES = (
    ("vad_end", "the VAD's end of speech"),
    ("turn_end", "end of turn decided"),
    ("transcript", "transcript ready"),
    ("request", "LLM request sent"),
    ("first_token", "first token"),
    ("first_sound", "first sound at the device"),
)


def run_voice(
    settings: Settings,
    *,
    llm: str,
    reply: ScriptedReply,
    tokens_per_second: float,
    trials: int,
    timeout: float,
    progress: Callable[[str], None],
) -> dict[str, Any]:
    from voicecli.bench.ab import open_text_source

    transcription = transcribe_espeak(settings, progress)
    questions = [SPOKEN_QUESTIONS[i % len(SPOKEN_QUESTIONS)] for i in range(trials)]
    progress(f"speaking {len(set(questions))} questions in the voice {USER_VOICE}")
    spoken = speak_as_user(settings, sorted(set(questions)))
    said = dict(zip(sorted(set(questions)), spoken, strict=True))
    with ExitStack() as stack:
        source = open_text_source(
            stack,
            llm=llm,
            reply=reply,
            tokens_per_second=tokens_per_second,
            settings=settings,
            prompt=SPOKEN_QUESTIONS[0],
            timeout=timeout,
        )
        room = VirtualRoom()
        stack.callback(room.close)
        rig = _VoiceRig(settings, room)
        stack.callback(rig.close)
        client = source.llm
        progress("warm-up turn (not counted)")
        rig.turn(said[questions[0]], client)
        turns = []
        for i, question in enumerate(questions):
            for mode in REPLY_TIMES:  # alternated, so that the machine's noise falls on both
                rig.input.voice.guesses = mode == "early"
                row = rig.turn(said[question], client)
                row["said"], row["mode"] = question, mode
                turns.append(row)
                v2v = row["ms"].get("first_sound")
                progress(
                    f"question {i + 1}/{trials} ({mode}): heard {row['heard']!r}; voice to "
                    f"voice {'-' if v2v is None else f'{v2v:.0f} ms'}"
                )
    return {
        "kind": "voice",
        "settings": {
            "voice": settings.voice,
            "user_voice": USER_VOICE,
            "hangover": settings.listen_hangover,
            "asr_model": settings.asr_model,
            "engine": settings.engine,
        },
        "llm": source.description,
        "transcription": transcription,
        "order": "each question asked twice: reply begun at a pause (early), then at the "
        "end of the turn",
        "turns": turns,
        "modes": {mode: _summary([t for t in turns if t["mode"] == mode]) for mode in REPLY_TIMES},
    }


def _summary(turns: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "stages_ms": {
            name: stats([t["ms"][name] for t in turns if name in t["ms"]])
            for name, _ in VOICE_STAGES
            if any(name in t["ms"] for t in turns)
        },
        "unanswered": sum(t["ms"].get("first_sound") is None for t in turns),
        "dropped_early_replies": sum(t["dropped_early_replies"] for t in turns),
        "wer": round(wer([t["said"] for t in turns], [t["heard"] for t in turns]), 3)
        if turns
        else None,
    }


def transcribe_espeak(settings: Settings, progress: Callable[[str], None]) -> dict[str, Any]:
    """``SENTENCES`` in eSpeak NG's voice, through ``voicecli transcribe``."""
    from voicecli.audio.wav import WavWriter
    from voicecli.bench.espeak import Espeak

    progress(f"transcribing {len(SENTENCES)} sentences spoken by eSpeak NG")
    espeak = Espeak()
    with tempfile.TemporaryDirectory(prefix="voicecli-espeak-") as tmp:
        files = []
        for i, sentence in enumerate(SENTENCES):
            path = Path(tmp) / f"sentence-{i + 1:02d}.wav"
            writer = WavWriter(path, espeak.sample_rate)
            writer.write(espeak.speak(sentence))
            writer.close()
            files.append(path)
        command = [sys.executable, "-m", "voicecli", "transcribe", *map(str, files)]
        if settings.asr_model:
            command += ["--asr-model", settings.asr_model]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        seconds = time.monotonic() - started
    if done.returncode != 0:
        raise VoiceCliError(f"voicecli transcribe failed: {done.stderr.strip()[-300:]}")
    heard = {}
    for line in done.stdout.splitlines():
        name, _, text = line.partition(": ")
        heard[Path(name).name] = text
    rows = []
    for sentence, path in zip(SENTENCES, files, strict=True):
        text = heard.get(path.name, "")
        rows.append({"said": sentence, "heard": text, "wer": round(wer([sentence], [text]), 3)})
    return {
        "voice": "eSpeak NG en-us",
        "sentences": rows,
        "wer": round(wer([r["said"] for r in rows], [r["heard"] for r in rows]), 3),
        "command_seconds": round(seconds, 1),  # the model's load included
    }


class _VoiceRig:
    """The room, the session and the user's input, wired as ``chat --listen`` wires them
    on speakers by default (the echo canceller, barge-in)."""

    def __init__(self, settings: Settings, room: VirtualRoom) -> None:
        from voicecli.listen.user_input import UserInput

        self.settings = settings
        self.closing = ExitStack()
        try:
            self.user, self.session = room.mouth_and_speakers(settings, self.closing)
            with room.entered():
                self.input = UserInput(settings, self.session)
                self.closing.callback(self.input.close)
        except BaseException:
            self.closing.close()
            raise

    def close(self) -> None:
        self.closing.close()

    def _ask(self, question: str, client: Any, pending: Any = None) -> Any:
        messages = [
            {"role": "system", "content": self.settings.system_prompt},
            {"role": "user", "content": question},
        ]
        return self.session.speak(
            lambda cancel, tl: client.stream(messages, cancel, tl),
            label="voice",
            fast_first=self.settings.fast_first,
            pending=pending,
        )

    def turn(self, speech: np.ndarray, client: Any) -> dict[str, Any]:
        """The user says ``speech``; what was heard is asked, as ``chat --listen`` asks
        it (early, at a pause, unless ``early_reply`` is off); the reply plays."""
        from voicecli.frames import AudioChunk, Guess
        from voicecli.timeline import FIRST_TOKEN, PLAYED, REQUEST_SENT

        spoke: list[float] = []
        self.user.begin_turn(lambda sentence, at: spoke.append(at), None)
        self.user.write(AudioChunk(0, speech, last=True))
        wait = len(speech) / 24_000 + HEARD_TIMEOUT
        dropped = 0  # replies begun at a pause and dropped: the user went on
        early = False
        while True:
            match self.input.next(timeout=wait):
                case None:
                    raise VoiceCliError(f"Nothing was heard of a question within {wait:.0f} s.")
                case Guess(text=text) as guess:
                    early = True
                    try:
                        result, confirmed = self.input.reply_early(
                            guess, lambda p, text=text: self._ask(text, client, p)
                        )
                    finally:
                        self.input.after_turn()
                    if confirmed is not None:
                        said = confirmed
                        break
                    dropped += 1
                case said:
                    early = False
                    self.input.before_turn()
                    try:
                        result = self._ask(said.text, client)
                    finally:
                        self.input.after_turn()
                    break
        self.user.drain(timeout=5.0)
        if not spoke:
            raise VoiceCliError("The user's speech never reached the microphone's device.")
        end = spoke[0] + len(speech) / 24_000  # the speech's last sample at the device
        spoken = said.spoken
        times = {
            "vad_end": spoken.ended if spoken else None,
            "turn_end": spoken.turned if spoken else None,
            "transcript": spoken.transcribed if spoken else None,
            "request": result.timeline.first(REQUEST_SENT),
            "first_token": result.timeline.first(FIRST_TOKEN),
            "first_sound": result.timeline.first(PLAYED),
        }
        time.sleep(BETWEEN_QUESTIONS)
        return {
            "heard": said.text,
            "early": early,
            "dropped_early_replies": dropped,
            "speech_s": round(len(speech) / 24_000, 2),
            "error": str(result.error) if result.error else None,
            "ms": {k: round((t - end) * 1000) for k, t in times.items() if t is not None},
            "speech_end": end,  # on the timeline's clock
            "timeline": result.timeline.to_dict(),
        }


def report_lines(result: dict[str, Any]) -> list[str]:
    tr = result["transcription"]
    s = result["settings"]
    modes = result["modes"]
    n = len(result["turns"]) // len(REPLY_TIMES)
    lines = [
        f"voicecli bench listen: {result['llm']['kind']} LLM, hangover {s['hangover']} s, "
        f"Whisper {s['asr_model']}",
        f"  voicecli transcribe, {len(tr['sentences'])} sentences spoken by {tr['voice']}: "
        f"WER {tr['wer']:.1%}",
        f"  voice to voice, {n} spoken questions each way, p50 ms after the speech's last "
        "sample at the microphone's device:",
        "    stage                          " + "".join(f"{m:>14}" for m in REPLY_TIMES),
    ]
    for name, label in VOICE_STAGES:
        cells = []
        for mode in REPLY_TIMES:
            st = modes[mode]["stages_ms"].get(name)
            cells.append(f"{st['median']:14.0f}" if st and st["median"] is not None else " " * 14)
        lines.append(f"    {label:<30}" + "".join(cells))
    for mode in REPLY_TIMES:
        m = modes[mode]
        sound = m["stages_ms"].get("first_sound")
        extra = f", {m['dropped_early_replies']} early replies dropped" if mode == "early" else ""
        lines.append(
            f"  {mode}: first sound p90 {sound['p90']:.0f} ms, "
            f"{m['unanswered']} unanswered{extra}, WER of the questions {m['wer']:.1%}"
            if sound and sound["p90"] is not None
            else f"  {mode}: {m['unanswered']} unanswered"
        )
    return lines


def write(result: dict[str, Any], output_dir: Any) -> Any:
    from voicecli.bench import report

    return report.write_json(result, output_dir / "voice.json")
