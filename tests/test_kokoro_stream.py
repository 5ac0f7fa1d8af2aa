"""KokoroSynthesizer.stream: chunks that tile each sentence, cut only where the model
pauses, whole sentences in "sentence" mode, and cancel acting within one part."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from voicecli.bench.quality import snr_db
from voicecli.cancel import CancelToken
from voicecli.frames import Sentence
from voicecli.timeline import SYNTH_END, SYNTH_FIRST_CHUNK, Timeline
from voicecli.tts.kokoro import torch_thread
from voicecli.tts.kokoro.phrases import (
    FIRST_WINDOW_FRAMES,
    GENERATOR_FRAME_SAMPLES,
    CostModel,
    CutKind,
    PhrasePlan,
)
from voicecli.tts.kokoro.stages import PreparedText
from voicecli.tts.kokoro.synthesizer import (
    CLAUSE_PAUSE_FRAMES,
    PREPARE_PHONEMES,
    KokoroSynthesizer,
    split_phonemes,
)
from voicecli.tts.steps import AudioPart, TextStaged
from voicecli.tts.voices import VoiceSpec

SENTENCES = [Sentence(0, "Hello there, this is the first one."), Sentence(1, "And a second.")]


@pytest.fixture
def every_few_frames(monkeypatch):
    """A model that pauses every 30 generator frames, on a machine so slow (and with
    forward passes so cheap to start) that phrases mode cuts at every pause."""
    monkeypatch.setattr(PreparedText, "pauses", lambda self: list(range(30, self.frames, 30)))
    machine_speed(monkeypatch, 5.0)


SILENT_TAIL = 20  # frames


@pytest.fixture
def speech_stops_early(monkeypatch):
    """A model whose speech ends 20 generator frames before each utterance does."""
    monkeypatch.setattr(
        PreparedText, "speech_end", lambda self, margin=6: self.frames - SILENT_TAIL
    )


def machine_speed(monkeypatch, seconds_per_frame: float) -> None:
    monkeypatch.setattr(
        CostModel, "predict", lambda self, frames, context=0: seconds_per_frame * frames
    )


def audio_of(chunks, sentence: int) -> list[np.ndarray]:
    return [c.samples for c in chunks if c.sentence == sentence and c.samples.size]


def chunks_of(synth, sentences, cancel=None):
    timeline = Timeline()
    return list(synth.stream(sentences, cancel or CancelToken(), timeline)), timeline


def test_phrases_tile_each_sentence_with_no_sample_lost(tiny_synth, every_few_frames):
    chunks, timeline = chunks_of(tiny_synth, SENTENCES)
    for sentence in SENTENCES:
        mine = [c for c in chunks if c.sentence == sentence.index]
        assert mine[-1].last and not any(c.last for c in mine[:-1])
        offsets = np.cumsum([0] + [c.samples.size for c in mine])
        assert [c.offset for c in mine] == offsets[:-1].tolist()  # contiguous, no overlap
        assert all(c.samples.size % GENERATOR_FRAME_SAMPLES == 0 for c in mine)
        assert timeline.first(SYNTH_FIRST_CHUNK, sentence.index) <= timeline.first(
            SYNTH_END, sentence.index
        )
    assert len([c for c in chunks if c.samples.size]) > len(SENTENCES)  # it cut


def test_every_part_knows_the_length_of_its_whole_sentence(tiny_synth, every_few_frames):
    chunks, _ = chunks_of(tiny_synth, SENTENCES)
    for sentence in SENTENCES:
        mine = [c for c in chunks if c.sentence == sentence.index and c.samples.size]
        total = sum(c.samples.size for c in mine)
        assert {c.length for c in mine} == {total}
    assert len(chunks) > 2 * len(SENTENCES)  # and at least one sentence came in parts


def test_long_phonemes_split_after_a_clause_mark_or_at_a_word_marked_as_a_clause():
    words = "ðə stˈɔɹi wɛnt ˈɔn wɪðˈWt ɐ sˈɪŋɡᵊl stˈɑp"
    clause = f"{words} {words}, {words} {words}"
    assert split_phonemes(clause, 100) == [f"{words} {words},", f"{words} {words}"]
    run = " ".join([words] * 6)  # no clause mark at all
    pieces = split_phonemes(run, 100)
    assert all(len(piece) <= 100 for piece in pieces) and len(pieces) == 3
    assert all(piece.endswith(",") for piece in pieces[:-1])  # said as clauses
    assert " ".join(piece.rstrip(",") for piece in pieces) == run  # nothing lost
    assert split_phonemes("x" * 250, 100) == ["x" * 99 + ",", "x" * 99 + ",", "x" * 52]


def test_no_piece_prepared_at_once_is_longer_than_the_limit(tiny_synth):
    text = " ".join(["Here is a reasonably long clause with many plain words"] * 12) + "."
    chunks = tiny_synth.phonemes(text)
    assert len(chunks) > 3 and max(len(c.phonemes) for c in chunks) <= PREPARE_PHONEMES


def test_a_sentence_longer_than_one_phoneme_chunk_has_its_length_estimated(tiny_synth):
    text = " ".join(["Here is a reasonably long clause with many plain words."] * 12)
    chunks = tiny_synth.phonemes(text)
    assert len(chunks) > 1  # more than PREPARE_PHONEMES
    speaker = tiny_synth.speaker()
    parts = speaker.speak_steps(chunks)
    staged = next(parts)  # the first chunk's text stages: only it is prepared
    assert isinstance(staged, TextStaged), staged
    estimate = staged.expected_samples
    parts.close()
    engine = tiny_synth.stages
    utts = [engine.prepare(c.phonemes, tiny_synth.voice, tiny_synth.speed) for c in chunks]
    # The speaker trims the turn's leading silence (its first utterance's onset).
    truth = (sum(u.frames for u in utts) - utts[0].onset()) * GENERATOR_FRAME_SAMPLES
    assert 0.5 * truth < estimate < 2.0 * truth
    assert (
        estimate != (utts[0].frames - utts[0].onset()) * GENERATOR_FRAME_SAMPLES
    )  # not the first only


def test_each_chunks_text_stages_are_a_step_of_their_own(tiny_synth):
    # A server serves other listeners between steps: the text stages must not be
    # folded into the first part's decode.
    chunks = tiny_synth.phonemes(" ".join(["Here is a long clause with plain words."] * 6))
    steps = list(tiny_synth.speaker().speak_steps(chunks))
    prepares = [i for i, step in enumerate(steps) if isinstance(step, TextStaged)]
    assert len(chunks) > 1 and len(prepares) == len(chunks) and prepares[0] == 0
    assert all(isinstance(steps[i + 1], AudioPart) for i in prepares)  # then its audio
    # Each chunk's decoded parts say where they were cut, the last at its end (or where
    # its speech ends, the silence after it given as zeros).
    for a, b in zip(prepares, [*prepares[1:], len(steps)], strict=True):
        cuts = [step.cut for step in steps[a + 1 : b] if step.cut is not None]
        assert cuts and [c.end for c in cuts] == sorted(c.end for c in cuts), cuts
        assert cuts[-1].kind in (CutKind.END, CutKind.SPEECH_END), cuts
        assert all(c.kind in (CutKind.PAUSE, CutKind.WINDOW) for c in cuts[:-1]), cuts


def test_a_cut_utterance_is_normalised_from_the_voice_prior_a_whole_one_is_not(tiny_model_dir):
    from voicecli.bench.quality import OnePass, render

    # A synthesizer of its own: the shared one's voice has no prior (exact renders).
    tiny_synth = KokoroSynthesizer(voice="af_tiny", model_dir=tiny_model_dir)
    assert tiny_synth.prior(tiny_synth.spec) is None
    tiny_synth.learn_voice(tiny_synth.spec)
    assert tiny_synth.prior(tiny_synth.spec) is not None
    text = "Here is a long first sentence, with a pause in it, and then some more words."
    slow = CostModel(rtf=3.0, per_call=0.05)  # a cold start that must cut
    cut, _ = render(tiny_synth, text, PhrasePlan(cost=slow), seed=5)
    own, _ = render(tiny_synth, text, PhrasePlan(cost=slow), seed=5, priors=False)
    whole, _ = render(tiny_synth, text, OnePass(cost=slow), seed=5)  # Kokoro's own pass
    again, _ = render(tiny_synth, text, OnePass(cost=slow), seed=5, priors=False)
    # The same render but for bfloat16's rounding, which threads make differ run to run.
    assert len(cut) == len(own) and len(whole) == len(again)
    assert np.abs(whole - again).mean() < np.abs(cut - own).mean() / 10


def test_a_voice_prior_is_kept_on_disk_for_the_next_process(tiny_model_dir, tmp_path, monkeypatch):
    first = KokoroSynthesizer(voice="af_tiny", model_dir=tiny_model_dir)
    first.learn_voice(first.spec)
    learnt = first.prior(first.spec)
    # A later process (a new synthesizer) reads it instead of learning it again.
    later = KokoroSynthesizer(voice="af_tiny", model_dir=tiny_model_dir)
    read = later.prior(later.spec)
    assert read is not None and read.seconds == learnt.seconds
    for (var, mean, n), (var2, mean2, n2) in zip(learnt.moments, read.moments, strict=True):
        assert torch.equal(var, var2) and torch.equal(mean, mean2) and n == n2
    # Another voice, another file: nothing read for it.
    assert later.prior(VoiceSpec.parse("am_tiny")) is None
    # A file that cannot be read is a miss (learnt again), never an error.
    for path in tmp_path.glob("voice-priors/*.npz"):
        path.write_bytes(b"not a prior")
    assert KokoroSynthesizer(voice="af_tiny", model_dir=tiny_model_dir).prior(first.spec) is None
    # Nor a cache that cannot be written: the prior is kept in memory.
    monkeypatch.setenv("VOICECLI_PRIOR_CACHE", "/proc/no-such-place")
    lone = KokoroSynthesizer(voice="af_tiny", model_dir=tiny_model_dir)
    lone.learn_voice(lone.spec)
    assert lone.prior(lone.spec) is not None


def prepared(synth, monkeypatch) -> list[PreparedText]:
    """Every utterance ``synth`` prepares from now on, in order."""
    utts = []
    prepare = synth.stages.prepare

    def recording(*args, **kwargs):
        utts.append(prepare(*args, **kwargs))
        return utts[-1]

    monkeypatch.setattr(synth.stages, "prepare", recording)
    return utts


def test_a_sentence_that_fits_in_one_pass_is_kokoros_render_silences_and_all(
    tiny_synth, speech_stops_early, monkeypatch
):
    monkeypatch.setattr(PreparedText, "onset", lambda self, margin=4: 4)
    machine_speed(monkeypatch, 0.0)
    utts = prepared(tiny_synth, monkeypatch)
    chunks, _ = chunks_of(tiny_synth, SENTENCES)
    first, second = (np.concatenate(audio_of(chunks, s.index)) for s in SENTENCES)
    # The turn starts at the first phoneme: its lead-in would only delay.
    assert first.size == (utts[0].frames - 4) * GENERATOR_FRAME_SAMPLES
    # With audio queued, a sentence is one pass over all of its frames, its lead-in
    # and the silence after its speech included: they are part of what the norms
    # average over, so the pass is the whole-sentence render.
    whole = tiny_synth.stages.decode(utts[1], 0, utts[1].frames, precision=tiny_synth.precision)
    assert second.size == whole.size
    assert snr_db(whole, second) > 60
    assert second[-SILENT_TAIL * GENERATOR_FRAME_SAMPLES :].any()  # decoded, not zeros


def test_where_the_whole_does_not_fit_the_silence_after_the_speech_is_zeros(
    tiny_synth, speech_stops_early, monkeypatch
):
    machine_speed(monkeypatch, 5.0)
    utts = prepared(tiny_synth, monkeypatch)
    chunks, _ = chunks_of(tiny_synth, SENTENCES)
    for sentence, utt in zip(SENTENCES, utts, strict=True):
        audio = np.concatenate(audio_of(chunks, sentence.index))
        # Every frame is there, as Kokoro times it (the tiny model has no lead-in)...
        assert audio.size == utt.frames * GENERATOR_FRAME_SAMPLES
        # ...and the silence is exactly silent: it was not worth a pass of its own.
        assert not audio[-SILENT_TAIL * GENERATOR_FRAME_SAMPLES :].any()
        assert audio[: -SILENT_TAIL * GENERATOR_FRAME_SAMPLES].any()


CLAUSE_CUT = [Sentence(0, "Well then, as you can see,"), Sentence(1, "this is the rest of it.")]


def after_a_clause_cut(synth, monkeypatch, seconds_per_frame: float) -> list[np.ndarray]:
    """The audio of the text after CLAUSE_CUT's clause, on a machine this fast; the
    clause itself ends in a comma's pause whatever the speed."""
    machine_speed(monkeypatch, seconds_per_frame)
    utts = prepared(synth, monkeypatch)
    chunks, _ = chunks_of(synth, CLAUSE_CUT)
    clause = utts[0]  # the first of the turn: from its first phoneme
    pause_ends = min(clause.frames, clause.speech_end() + CLAUSE_PAUSE_FRAMES)
    assert (
        sum(a.size for a in audio_of(chunks, 0))
        == (pause_ends - clause.onset()) * GENERATOR_FRAME_SAMPLES
    )
    return audio_of(chunks, 1)


def test_after_a_clause_cut_a_fast_machine_pauses_as_for_a_comma(
    tiny_synth, speech_stops_early, monkeypatch
):
    monkeypatch.setattr(PreparedText, "onset", lambda self, margin=4: 4)
    utts = prepared(tiny_synth, monkeypatch)
    second = np.concatenate(after_a_clause_cut(tiny_synth, monkeypatch, 0.0))
    # The next clause starts at once, its lead-in decoded (as the norms need it) but
    # not played: the rest of Kokoro's render of it, exactly.
    whole = tiny_synth.stages.decode(utts[1], 0, utts[1].frames, precision=tiny_synth.precision)
    assert second.size == whole.size - 4 * GENERATOR_FRAME_SAMPLES
    assert snr_db(whole[4 * GENERATOR_FRAME_SAMPLES :], second) > 60


def test_after_a_clause_cut_a_slow_machine_pauses_longer_not_mid_phrase(
    tiny_synth, speech_stops_early, monkeypatch
):
    second = after_a_clause_cut(tiny_synth, monkeypatch, 5.0)
    # The rest of the silence Kokoro gave the clause comes before the next clause instead,
    # and no more: the pause is planned, never longer than Kokoro's own.
    assert second[0].size == (SILENT_TAIL - CLAUSE_PAUSE_FRAMES) * GENERATOR_FRAME_SAMPLES
    assert not second[0].any() and second[1].any()


def test_after_a_clause_with_no_silence_to_spare_the_next_keeps_its_lead_in(
    tiny_synth, monkeypatch
):
    monkeypatch.setattr(PreparedText, "onset", lambda self, margin=4: 4)
    tail = CLAUSE_PAUSE_FRAMES  # Kokoro's own pause is no longer than a comma's
    monkeypatch.setattr(PreparedText, "speech_end", lambda self, margin=6: self.frames - tail)
    second = after_a_clause_cut(tiny_synth, monkeypatch, 5.0)
    assert second[0].size == 4 * GENERATOR_FRAME_SAMPLES and not second[0].any()


def test_sentence_mode_decodes_every_sentence_whole(
    tiny_model_dir, every_few_frames, speech_stops_early
):
    synth = KokoroSynthesizer(voice="af_tiny", model_dir=tiny_model_dir, mode="sentence")
    chunks, _ = chunks_of(synth, SENTENCES)
    assert [(c.sentence, c.last) for c in chunks] == [(0, False), (0, True), (1, False), (1, True)]
    assert all(
        c.samples[-GENERATOR_FRAME_SAMPLES:].any() for c in chunks if c.samples.size
    )  # decoded


@pytest.fixture
def no_pause_on_a_fast_machine(monkeypatch):
    """A model that pauses nowhere, on a machine fast enough that the first phrase of a
    turn starts with a window (0.01 s per frame: a whole phrase keeps the listener
    waiting well over WINDOW_GAIN longer than a window does)."""
    monkeypatch.setattr(PreparedText, "pauses", lambda self: [])
    machine_speed(monkeypatch, 0.01)


def test_a_turn_with_no_pause_starts_with_windows_that_tile_the_sentence(
    tiny_synth, no_pause_on_a_fast_machine
):
    chunks, _ = chunks_of(tiny_synth, SENTENCES[:1])
    audio = [c for c in chunks if c.samples.size]
    assert len(audio) > 1  # cut, though the model pauses nowhere
    assert audio[0].samples.size == FIRST_WINDOW_FRAMES * GENERATOR_FRAME_SAMPLES
    offsets = np.cumsum([0] + [c.samples.size for c in audio])
    assert [c.offset for c in audio] == offsets[:-1].tolist()
    utt = tiny_synth.stages.prepare(
        tiny_synth.phonemes(SENTENCES[0].text)[0].phonemes, tiny_synth.voice, 1.0
    )
    assert offsets[-1] == (utt.frames - utt.onset()) * GENERATOR_FRAME_SAMPLES  # nothing lost


def test_cancel_stops_within_one_window(tiny_synth, no_pause_on_a_fast_machine):
    cancel = CancelToken()
    got = []
    for chunk in tiny_synth.stream(SENTENCES, cancel, Timeline()):
        got.append(chunk)
        cancel.cancel("key")
    assert len(got) == 1 and got[0].samples.size == FIRST_WINDOW_FRAMES * GENERATOR_FRAME_SAMPLES


def test_cancel_stops_within_one_part(tiny_synth, every_few_frames):
    cancel = CancelToken()
    got = []
    for chunk in tiny_synth.stream(SENTENCES, cancel, Timeline()):
        got.append(chunk)
        cancel.cancel("key")
    assert len(got) == 1


def test_a_bad_mode_is_a_clear_error(tiny_model_dir):
    from voicecli.errors import VoiceCliError

    with pytest.raises(VoiceCliError, match="use phrases, sentence"):
        KokoroSynthesizer(voice="af_tiny", model_dir=tiny_model_dir, mode="windows")


def test_synth_threads_set_the_threads_of_torchs_thread(tiny_model_dir):
    import torch

    try:
        synth = KokoroSynthesizer(voice="af_tiny", model_dir=tiny_model_dir, threads=1)
        assert torch_thread.run(torch.get_num_threads) == 1 and synth.describe()["threads"] == 1
    finally:
        torch_thread.configure(None)


def words_of(chunks, sentence: int) -> list:
    return [w for c in chunks if c.sentence == sentence for w in c.words]


def test_each_chunk_carries_the_words_that_start_in_it_in_order(tiny_synth, every_few_frames):
    assert tiny_synth.capabilities.word_timings  # English
    chunks, _ = chunks_of(tiny_synth, SENTENCES)
    for sentence in SENTENCES:
        words = words_of(chunks, sentence.index)
        assert [w.text for w in words] == sentence.text.rstrip(".").replace(",", "").split()
        total = sum(c.samples.size for c in chunks if c.sentence == sentence.index)
        assert all(0 <= w.start < w.end <= total for w in words)
        assert all(a.end <= b.start for a, b in zip(words, words[1:], strict=False))
        for c in chunks:
            if c.sentence == sentence.index and c.samples.size:
                assert all(c.offset <= w.start < c.offset + c.samples.size for w in c.words)


def test_word_times_in_phrases_are_those_of_the_whole_sentence_shifted_by_its_trim(
    tiny_synth, every_few_frames, monkeypatch
):
    # Phrases mode drops the turn's lead-in and decodes in parts; the words must move
    # with the audio, by exactly what was trimmed, and not with the parts.
    chunks, _ = chunks_of(tiny_synth, SENTENCES[:1])
    phrases = words_of(chunks, 0)
    monkeypatch.setattr(tiny_synth, "mode", "sentence")
    whole = words_of(chunks_of(tiny_synth, SENTENCES[:1])[0], 0)
    utt = tiny_synth.stages.prepare(
        tiny_synth.phonemes(SENTENCES[0].text)[0].phonemes, tiny_synth.voice, 1.0
    )
    trim = utt.onset() * GENERATOR_FRAME_SAMPLES
    assert [w.text for w in phrases] == [w.text for w in whole]
    assert [(w.start, w.end) for w in phrases] == [
        (max(0, w.start - trim), max(0, w.end - trim)) for w in whole
    ]
    # Sentence mode is Kokoro's own timing: each word from its first phoneme's frame.
    frames = 2 * np.concatenate([[0], np.cumsum(utt.durations)])
    assert whole[0].start == int(frames[1]) * GENERATOR_FRAME_SAMPLES  # right after <bos>


def test_words_of_a_long_text_are_timed_across_its_phoneme_chunks(tiny_synth):
    text = " ".join(["Here is a reasonably long clause with many plain words."] * 6)
    chunks, _ = chunks_of(tiny_synth, [Sentence(0, text)])
    words = words_of(chunks, 0)
    assert len(tiny_synth.phonemes(text)) > 1
    assert [w.text for w in words] == text.replace(".", "").split()
    assert all(a.end <= b.start for a, b in zip(words, words[1:], strict=False))
