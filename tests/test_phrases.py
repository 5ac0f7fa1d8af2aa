"""Where the synthesizer cuts a sentence into phrases: the decisions, as pure logic."""

from __future__ import annotations

import time

import pytest

from voicecli.tts.phrases import FRAME_SECONDS, CostModel, PhrasePlan, Playhead

FRAMES = 400  # a 5 s sentence
PAUSES = [40, 100, 200, 300]


def plan(*, rtf: float = 0.5, queued: float = 0.0) -> PhrasePlan:
    p = PhrasePlan(cost=CostModel(rtf=rtf, per_call=0.05), min_part=24)
    if queued:
        p.playhead = Playhead(started=time.monotonic(), emitted=queued)  # all of it queued
    return p


def test_a_turn_starts_with_the_cut_that_keeps_the_listener_waiting_least():
    # Fast enough that the part after the first pause decodes while the first plays.
    assert plan(rtf=0.15).next_end(0, FRAMES, PAUSES) == 40


def test_no_cut_when_a_second_forward_pass_costs_more_silence_than_it_saves():
    # A large cost per call: the stall after a short first phrase outweighs its gain.
    p = PhrasePlan(cost=CostModel(rtf=0.5, per_call=0.5), min_part=24)
    assert p.next_end(0, 100, [30]) == 100
    p.cost.per_call = 0.05
    assert p.next_end(0, 100, [30]) < 100


def decode_as_planned(p: PhrasePlan, frames: int, pauses: list[int]) -> list[tuple[int, float]]:
    """Every part the plan cuts, on a clock that the cost model drives: (its end, seconds
    the listener waited for it once the audio before it had played)."""
    now, start, parts = 0.0, 0, []
    first_chunk, emitted = None, 0.0
    while start < frames:
        # The listener as the plan sees it: playing since the first chunk, at 1x.
        playing = 0.0 if first_chunk is None else now - first_chunk
        p.playhead = Playhead(time.monotonic() - playing if first_chunk is not None else None)
        p.playhead.emitted = emitted
        ahead = max(0.0, emitted - playing)
        end = p.next_end(start, frames, pauses)
        took = p.cost.predict(end - start, p.context)
        parts.append((end, max(0.0, took - ahead)))
        now += took
        first_chunk = now if first_chunk is None else first_chunk
        emitted += (end - start) * FRAME_SECONDS
        start = end
    return parts


def test_a_long_first_phrase_starts_with_a_window_and_never_stalls_inside_it():
    p = plan(rtf=0.25)
    parts = decode_as_planned(p, FRAMES, [200])
    first, waited = parts[0]
    assert first == p.first_window  # 0.15 s of waiting instead of 0.68 s to the pause
    assert waited == pytest.approx(p.cost.predict(p.first_window))
    # The parts that follow are decoded while the audio before them plays: no stall.
    assert all(w == 0 for _, w in parts[1:]), parts


def test_no_window_where_a_pause_comes_soon_or_the_machine_cannot_keep_up():
    assert plan(rtf=0.25).next_end(0, FRAMES, [40, 100]) == 40  # it saves less than 0.15 s
    assert plan(rtf=0.25).next_end(0, 50, []) == 50  # too short to be worth a window
    # So slow that the parts after a window could not keep up: a stall would fall inside
    # a word, so the turn waits for the whole phrase instead.
    assert plan(rtf=0.9).next_end(0, FRAMES, [200]) == 200


def test_with_audio_queued_a_window_that_fits_instead_of_a_stall():
    # 0.35 s of compute fit in what is queued; 200 frames take 0.675 s, a 0.175 s stall.
    p = plan(rtf=0.25, queued=0.5)
    end = p.next_end(0, FRAMES, [200])
    assert 24 <= end < 200 and p.cost.predict(end) <= 0.7 * 0.5


def test_the_rest_is_decoded_whole_whenever_that_fits_in_what_is_queued():
    assert plan(rtf=0.5, queued=10.0).next_end(0, FRAMES, PAUSES) == FRAMES  # no cut
    # Decoding the rest costs 0.05 + 0.5 * 5 = 2.55 s, and 0.7 of 3.7 s queued covers it.
    # A cut would not bring the next sentence's text stages any sooner: they wait for all
    # of this sentence's parts either way.
    assert plan(rtf=0.5, queued=3.7).next_end(0, FRAMES, PAUSES) == FRAMES
    assert plan(rtf=0.5, queued=3.6).next_end(0, FRAMES, PAUSES) < FRAMES  # 2.52 s: a cut


def test_one_pass_fits_in_the_queued_audio_and_in_the_limit_while_others_wait():
    assert not plan(rtf=0.5).fits(1)  # nothing queued: nothing fits
    p = plan(rtf=0.5, queued=3.7)
    assert p.fits(FRAMES) and not p.fits(FRAMES + 10)  # 2.55 s and 2.61 s of 2.59
    p.max_seconds = 0.8
    assert p.fits(100) and not p.fits(200)


def test_the_silence_after_the_speech_is_decoded_only_with_the_whole_rest():
    # 0.7 * 3.7 s covers the whole 400 frames (2.55 s): silence and all, in one pass.
    assert plan(rtf=0.5, queued=3.7).next_end(0, FRAMES, PAUSES, speech_end=350) == FRAMES
    # 0.7 * 3.4 s does not, but covers the speech alone (350 frames, 2.24 s).
    assert plan(rtf=0.5, queued=3.4).next_end(0, FRAMES, PAUSES, speech_end=350) == 350
    # Less still: the speech is planned as if it were all there is.
    p = plan(rtf=0.5, queued=2.4)
    assert p.next_end(0, FRAMES, PAUSES, speech_end=350) == p.next_end(0, 350, PAUSES) == 200


def test_otherwise_the_farthest_pause_that_fits_in_what_is_queued():
    p = plan(rtf=0.5, queued=2.4)  # 0.7 * 2.4 = 1.68 s of compute: 200 frames (1.3 s) fit
    assert p.next_end(0, FRAMES, PAUSES) == 200
    assert p.next_end(100, FRAMES, PAUSES) == 300
    assert p.next_end(200, FRAMES, PAUSES) == FRAMES  # the rest, 1.3 s, fits


def test_while_others_wait_a_part_is_kept_to_the_limit_where_a_pause_allows():
    p = plan(rtf=0.5, queued=10.0)  # alone, it would decode the rest whole
    p.max_seconds = 0.8  # 0.05 + 0.5 * 100 frames * 12.5 ms = 0.675 s fits, 200 frames not
    assert p.next_end(0, FRAMES, PAUSES) == 100
    p.max_seconds = 0.1  # nothing fits: the shortest part there is
    assert p.next_end(0, FRAMES, PAUSES) == 40
    assert p.next_end(0, FRAMES, []) == FRAMES  # no pause: the sentence is one part still
    p.max_seconds = None
    assert p.next_end(0, FRAMES, PAUSES) == FRAMES


def test_no_part_shorter_than_the_minimum():
    p = plan(rtf=0.5)
    assert p.next_end(0, 50, [10, 40]) == 50  # both would leave a sliver
    for pauses in ([10, 390], [], [30, 60, 370]):
        for end, _ in decode_as_planned(plan(rtf=0.25), FRAMES, pauses):
            assert end == FRAMES or (end >= 24 and FRAMES - end >= 24)


def test_the_cost_model_learns_the_machine():
    cost = CostModel(rtf=1.0, per_call=0.05)
    # The first measurement replaces the pessimistic guess...
    cost.observe(80, 24, 0.05 + 0.25 * 104 * 0.0125)
    assert cost.rtf == pytest.approx(0.25)
    # ...later ones are averaged in: one slow pass moves it halfway, not all the way.
    cost.observe(80, 24, 0.05 + 0.75 * 104 * 0.0125)
    assert cost.rtf == pytest.approx(0.5)
    for _ in range(8):
        cost.observe(80, 24, 0.05 + 0.25 * 104 * 0.0125)
    assert cost.rtf == pytest.approx(0.25, abs=0.01)


def test_the_playhead_counts_down_from_the_first_chunk():
    head = Playhead()
    assert head.ahead(now=5.0) == 0.0
    head.emit(2.0, now=10.0)
    head.emit(1.0, now=10.5)
    assert head.ahead(now=11.0) == pytest.approx(2.0)
    assert head.ahead(now=20.0) == 0.0
