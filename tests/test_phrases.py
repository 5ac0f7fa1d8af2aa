"""Where the synthesizer cuts a sentence into phrases: the decisions, as pure logic."""

from __future__ import annotations

import pytest

from voicecli.tts.kokoro.phrases import (
    GENERATOR_FRAME_SECONDS,
    SAFETY,
    CostModel,
    Cut,
    CutKind,
    PhrasePlan,
    Playhead,
)

FRAMES = 400  # a 5 s sentence
PAUSES = [40, 100, 200, 300]


def plan(*, rtf: float = 0.5) -> PhrasePlan:
    return PhrasePlan(cost=CostModel(rtf=rtf, per_call=0.05), min_part=24)


def end(p: PhrasePlan, start: int, frames: int, pauses: list[int], queued: float = 0.0,
        **more) -> int:  # fmt: skip
    """Where the plan cuts, with ``queued`` seconds of audio ahead of the listener."""
    return p.next_cut(start, frames, pauses, ahead=queued, **more).end


def test_a_turn_starts_with_the_cut_that_keeps_the_listener_waiting_least():
    # Fast enough that the part after the first pause decodes while the first plays.
    assert end(plan(rtf=0.15), 0, FRAMES, PAUSES) == 40


def test_no_cut_when_a_second_forward_pass_costs_more_silence_than_it_saves():
    # A large cost per call: the stall after a short first phrase outweighs its gain.
    p = PhrasePlan(cost=CostModel(rtf=0.5, per_call=0.5), min_part=24)
    assert end(p, 0, 100, [30]) == 100
    p.cost.per_call = 0.05
    assert end(p, 0, 100, [30]) < 100


def decode_as_planned(p: PhrasePlan, frames: int, pauses: list[int]) -> list[tuple[int, float]]:
    """Every part the plan cuts, on a clock that the cost model drives: (its end, seconds
    the listener waited for it once the audio before it had played)."""
    now, start, parts, inside = 0.0, 0, [], False
    first_chunk, emitted = None, 0.0
    while start < frames:
        # The listener: playing since the first chunk, at 1x.
        playing = 0.0 if first_chunk is None else now - first_chunk
        ahead = max(0.0, emitted - playing)
        cut = p.next_cut(start, frames, pauses, ahead=ahead, inside=inside)
        took = p.cost.predict(cut.end - start, p.context)
        parts.append((cut.end, max(0.0, took - ahead)))
        now += took
        first_chunk = now if first_chunk is None else first_chunk
        emitted += (cut.end - start) * GENERATOR_FRAME_SECONDS
        start, inside = cut.end, cut.kind is CutKind.WINDOW
    return parts


def test_each_cut_says_what_kind_of_end_it_is():
    p = plan(rtf=0.5)
    assert p.next_cut(0, FRAMES, PAUSES, ahead=3.7) == Cut(FRAMES, CutKind.END)
    assert p.next_cut(0, FRAMES, PAUSES, ahead=2.4) == Cut(200, CutKind.PAUSE)
    speech = p.next_cut(0, FRAMES, PAUSES, ahead=3.4, speech_end=350)
    assert speech == Cut(350, CutKind.SPEECH_END)
    window = plan(rtf=0.25).next_cut(0, FRAMES, [200], ahead=0.0)
    assert window == Cut(p.first_window, CutKind.WINDOW)


def test_inside_a_word_the_next_part_is_a_window_that_fits_never_a_stall():
    p = plan(rtf=0.25)  # 0.35 s of compute fit in 0.5 s queued: 127 frames, not 168
    between_words = p.next_cut(32, FRAMES, [200], ahead=0.5)
    assert between_words == Cut(200, CutKind.PAUSE)  # a short stall, at a pause
    inside = p.next_cut(32, FRAMES, [200], ahead=0.5, inside=True)
    assert inside.kind is CutKind.WINDOW and p.cost.predict(inside.end - 32) <= 0.7 * 0.5


def test_a_long_first_phrase_starts_with_a_window_and_never_stalls_inside_it():
    p = plan(rtf=0.25)
    parts = decode_as_planned(p, FRAMES, [200])
    first, waited = parts[0]
    assert first == p.first_window  # 0.15 s of waiting instead of 0.68 s to the pause
    assert waited == pytest.approx(p.cost.predict(p.first_window))
    # The parts that follow are decoded while the audio before them plays: no stall.
    assert all(w == 0 for _, w in parts[1:]), parts


def test_no_window_where_a_pause_comes_soon_or_the_machine_cannot_keep_up():
    assert end(plan(rtf=0.25), 0, FRAMES, [40, 100]) == 40  # it saves less than 0.15 s
    assert end(plan(rtf=0.25), 0, 50, []) == 50  # too short to be worth a window
    # So slow that the parts after a window could not keep up: a stall would fall inside
    # a word, so the turn waits for the whole phrase instead.
    assert end(plan(rtf=0.9), 0, FRAMES, [200]) == 200


def test_with_audio_queued_a_window_that_fits_instead_of_a_stall():
    # 0.35 s of compute fit in what is queued; 200 frames take 0.675 s, a 0.175 s stall.
    p = plan(rtf=0.25)
    cut = p.next_cut(0, FRAMES, [200], ahead=0.5)
    assert cut.kind is CutKind.WINDOW
    assert 24 <= cut.end < 200 and p.cost.predict(cut.end) <= 0.7 * 0.5


def test_the_rest_is_decoded_whole_whenever_that_fits_in_what_is_queued():
    assert end(plan(rtf=0.5), 0, FRAMES, PAUSES, queued=10.0) == FRAMES  # no cut
    # Decoding the rest costs 0.05 + 0.5 * 5 = 2.55 s, and 0.7 of 3.7 s queued covers it.
    # A cut would not bring the next sentence's text stages any sooner: they wait for all
    # of this sentence's parts either way.
    assert end(plan(rtf=0.5), 0, FRAMES, PAUSES, queued=3.7) == FRAMES
    assert end(plan(rtf=0.5), 0, FRAMES, PAUSES, queued=3.6) < FRAMES  # 2.52 s: a cut


def test_one_pass_fits_in_the_queued_audio_and_in_the_limit_while_others_wait():
    assert not plan(rtf=0.5).fits(1, ahead=0.0)  # nothing queued: nothing fits
    p = plan(rtf=0.5)
    assert p.fits(FRAMES, 3.7) and not p.fits(FRAMES + 10, 3.7)  # 2.55 s and 2.61 s of 2.59
    p.max_seconds = 0.8
    assert p.fits(100, 3.7) and not p.fits(200, 3.7)


def test_the_silence_after_the_speech_is_decoded_only_with_the_whole_rest():
    # 0.7 * 3.7 s covers the whole 400 frames (2.55 s): silence and all, in one pass.
    assert end(plan(rtf=0.5), 0, FRAMES, PAUSES, speech_end=350, queued=3.7) == FRAMES
    # 0.7 * 3.4 s does not, but covers the speech alone (350 frames, 2.24 s).
    assert end(plan(rtf=0.5), 0, FRAMES, PAUSES, speech_end=350, queued=3.4) == 350
    # Less still: the speech is planned as if it were all there is.
    p = plan(rtf=0.5)
    assert end(p, 0, FRAMES, PAUSES, 2.4, speech_end=350) == end(p, 0, 350, PAUSES, 2.4) == 200


def test_otherwise_the_farthest_pause_that_fits_in_what_is_queued():
    p = plan(rtf=0.5)  # 0.7 * 2.4 = 1.68 s of compute: 200 frames (1.3 s) fit
    assert end(p, 0, FRAMES, PAUSES, 2.4) == 200
    assert end(p, 100, FRAMES, PAUSES, 2.4) == 300
    assert end(p, 200, FRAMES, PAUSES, 2.4) == FRAMES  # the rest, 1.3 s, fits


def test_while_others_wait_a_part_is_kept_to_the_limit_where_a_pause_allows():
    p = plan(rtf=0.5)  # alone, with 10 s queued, it would decode the rest whole
    p.max_seconds = 0.8  # 0.05 + 0.5 * 100 frames * 12.5 ms = 0.675 s fits, 200 frames not
    assert end(p, 0, FRAMES, PAUSES, 10.0) == 100
    p.max_seconds = 0.1  # nothing fits: the shortest part there is
    assert end(p, 0, FRAMES, PAUSES, 10.0) == 40
    assert end(p, 0, FRAMES, [], 10.0) == FRAMES  # no pause: the sentence is one part still
    p.max_seconds = None
    assert end(p, 0, FRAMES, PAUSES, 10.0) == FRAMES


def test_no_part_shorter_than_the_minimum():
    p = plan(rtf=0.5)
    assert end(p, 0, 50, [10, 40]) == 50  # both would leave a sliver
    for pauses in ([10, 390], [], [30, 60, 370]):
        for cut, _ in decode_as_planned(plan(rtf=0.25), FRAMES, pauses):
            assert cut == FRAMES or (cut >= 24 and FRAMES - cut >= 24)


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


def test_a_pause_before_a_phrase_leaves_its_decoding_the_planners_margin():
    p = PhrasePlan(cost=CostModel(rtf=0.5, per_call=0.1), min_part=24)
    takes = p.cost.predict(32)  # 0.3 s
    assert p.pause_for(32, ahead=takes / SAFETY + 0.1) == 0.0  # queued audio covers it
    # Just enough queued to decode it, with nothing to spare: a pause adds the margin.
    assert p.pause_for(32, ahead=takes) == pytest.approx(takes / SAFETY - takes)
    assert p.fits(32, takes + p.pause_for(32, ahead=takes) + 1e-9)


def test_the_playhead_counts_down_from_the_first_chunk():
    head = Playhead()
    assert head.ahead(now=5.0) == 0.0
    head.emit(2.0, now=10.0)
    head.emit(1.0, now=10.5)
    assert head.ahead(now=11.0) == pytest.approx(2.0)
    assert head.ahead(now=20.0) == 0.0
