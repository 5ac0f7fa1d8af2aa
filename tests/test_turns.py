"""The turn state machines (``voicecli.listen.turns``) on scripted speech probabilities,
as the microphone's thread drives them: no audio, no clock. Each frame carries its own
index, so what a turn hands on can be checked frame by frame."""

from __future__ import annotations

import numpy as np
import pytest

from voicecli.frames import (
    HEARING_FRAME,
    HEARING_FRAME_SECONDS,
    Pausing,
    Resumed,
    SpeechDropped,
    SpeechOnset,
    SpeechStarted,
    TurnDropped,
    UserSpeech,
)
from voicecli.listen.turns import Phase, TurnDetector, Turns

SPEECH, SILENCE = 0.9, 0.05


class ScriptedVad:
    """A VAD that says what the test scripts: the probability of each frame in turn."""

    def __init__(self, probabilities: list[float]) -> None:
        self.probabilities = list(probabilities)
        self.heard = 0
        self.resets: list[int] = []  # frames heard before each reset

    def __call__(self, frame: np.ndarray) -> float:
        self.heard += 1
        return self.probabilities.pop(0)

    def reset(self) -> None:
        self.resets.append(self.heard)


def frame(n: int) -> np.ndarray:
    return np.full(HEARING_FRAME, float(n), np.float32)


def frames_of(seconds: float) -> int:
    return round(seconds / HEARING_FRAME_SECONDS)


def run(detector: TurnDetector, probabilities: list[float]) -> list:
    events = []
    for n, probability in enumerate(probabilities):
        events += detector.push(frame(n), probability)
    return events


def speech(seconds: float) -> list[float]:
    return [SPEECH] * frames_of(seconds)


def silence(seconds: float) -> list[float]:
    return [SILENCE] * frames_of(seconds)


def kinds(events: list) -> list[type]:
    return [type(e) for e in events]


def test_a_pause_shorter_than_the_hangover_stays_inside_the_turn():
    detector = TurnDetector(hangover=1.0)
    events = run(detector, silence(0.5) + speech(1.0) + silence(0.6) + speech(0.5) + silence(1.1))
    assert kinds(events) == [
        SpeechOnset, SpeechStarted, Pausing, Resumed, Pausing, UserSpeech
    ]  # fmt: skip
    turn = events[-1]
    assert turn.start == pytest.approx(0.5, abs=HEARING_FRAME_SECONDS)
    assert turn.end == pytest.approx(0.5 + 1.0 + 0.6 + 0.5, abs=HEARING_FRAME_SECONDS)
    # A shorter hangover cuts the same speech in two at the pause.
    cut = run(TurnDetector(hangover=0.5), silence(0.5) + speech(1.0) + silence(0.6) + speech(0.5))
    assert kinds(cut).count(UserSpeech) == 1 and cut[-1] != turn


def test_what_a_pause_hands_on_is_the_turn_the_hangover_then_ends():
    events = run(TurnDetector(), silence(0.3) + speech(1.0) + silence(1.2))
    onset, started, pausing, turn = events
    assert onset.at == started.at == turn.start  # held, then confirmed, from its first frame
    assert pausing.speech.key == turn.key  # the same speech: its transcript is reused
    assert np.array_equal(pausing.speech.audio, turn.audio[: len(pausing.speech.audio)])
    assert pausing.speech.seconds < turn.seconds  # less silence after it
    # The pre-roll before the speech and a little silence after it are kept.
    first = int(turn.audio[0])
    assert first == frames_of(0.3) - frames_of(0.25)
    assert not turn.capped


def test_a_click_holds_a_reply_and_lets_it_go_and_is_no_turn():
    events = run(TurnDetector(), silence(0.5) + speech(0.1) + silence(1.5))
    assert kinds(events) == [SpeechOnset, SpeechDropped]
    # One frame of a click does not even hold the reply.
    assert run(TurnDetector(), silence(0.5) + [SPEECH] + silence(1.5)) == []


def test_speech_with_no_pause_is_capped_and_none_of_it_is_lost():
    events = run(TurnDetector(max_seconds=3.0), speech(7.0) + silence(1.5))
    turns = [e for e in events if type(e) is UserSpeech]
    assert turns[0].capped and turns[0].seconds == pytest.approx(3.0, abs=0.3)
    assert not turns[-1].capped
    heard = {int(n) for turn in turns for n in turn.audio[::HEARING_FRAME]}
    assert set(range(frames_of(7.0))) <= heard  # every frame of speech is in a turn


def test_a_dip_just_after_speech_is_still_speech():
    # Hysteresis: a frame just under the threshold right after speech stays speech.
    detector = TurnDetector(hangover=0.2, threshold=0.5)
    dipped = speech(0.5) + [0.4] * frames_of(0.3) + silence(0.5)
    turn = [e for e in run(detector, dipped) if type(e) is UserSpeech][0]
    assert turn.end == pytest.approx(0.8, abs=HEARING_FRAME_SECONDS)


def test_muting_mid_turn_drops_the_turn_and_the_vad_starts_afresh():
    vad = ScriptedVad(speech(0.5) + silence(1.5))  # what is heard: none of the muted half
    turns = Turns(vad, TurnDetector())
    flags = [{}] * frames_of(0.5) + [{"muted": True}] * frames_of(0.5) + [{}] * frames_of(1.5)
    events = []
    for n, flag in enumerate(flags):
        events += turns.hear(frame(n), muted=flag.get("muted", False), held=True)
    # The turn begun before the mute is forgotten; nothing muted reaches the VAD.
    assert kinds(events) == [SpeechOnset, SpeechStarted, TurnDropped]
    assert vad.heard == frames_of(0.5) + frames_of(1.5)
    assert vad.resets == [frames_of(0.5)]  # once, when the microphone is heard again
    assert not turns.hearing


def test_muting_during_an_onset_lets_the_held_reply_go_on():
    vad = ScriptedVad(speech(0.1))
    turns = Turns(vad, TurnDetector())
    events = [
        e for n in range(frames_of(0.1)) for e in turns.hear(frame(n), muted=False, held=True)
    ]
    events += turns.hear(frame(99), muted=True, held=True)
    assert kinds(events) == [SpeechOnset, SpeechDropped]


def test_push_to_talk_hears_only_while_held_and_letting_go_ends_the_turn():
    vad = ScriptedVad(speech(1.0))
    turns = Turns(vad, TurnDetector(hangover=1.0), push_to_talk=True)
    events = []
    for n in range(frames_of(0.5)):  # speech, key up: nobody hears it
        events += turns.hear(frame(n), muted=False, held=False)
    assert events == [] and vad.heard == 0
    for n in range(frames_of(1.0)):  # the key down: heard
        events += turns.hear(frame(n), muted=False, held=True)
    assert vad.resets == [0]  # afresh at the press
    assert turns.hearing
    events += turns.hear(frame(0), muted=False, held=False)  # let go: no hangover to wait
    assert kinds(events) == [SpeechOnset, SpeechStarted, UserSpeech]
    assert not turns.hearing


def test_what_is_only_the_speakers_echo_is_never_a_turn():
    vad = ScriptedVad(speech(2.0) + silence(1.5))
    turns = Turns(vad, TurnDetector())
    events = []
    for n in range(frames_of(3.5)):
        events += turns.hear(frame(n), muted=False, held=True, only_echo=n < frames_of(2.0))
    assert events == []
    assert vad.heard == frames_of(3.5)  # the VAD still follows the stream


def test_the_phases_of_a_turn():
    detector = TurnDetector(hangover=0.5)
    seen = []
    for n, probability in enumerate(speech(0.5) + silence(0.2) + speech(0.2) + silence(0.6)):
        detector.push(frame(n), probability)
        if not seen or seen[-1] is not detector.phase:
            seen.append(detector.phase)
    assert seen == [
        Phase.STARTING, Phase.ONSET, Phase.SPEAKING, Phase.PAUSED, Phase.SPEAKING,
        Phase.PAUSED, Phase.IDLE,
    ]  # fmt: skip
