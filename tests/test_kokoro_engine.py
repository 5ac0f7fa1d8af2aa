"""The staged Kokoro engine against kokoro's own code: the same audio when run whole,
exact when decoded in parts with the whole utterance's statistics, and seams that lose
or duplicate no sample. If kokoro's internals change, these fail first."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest
import torch

from voicecli.bench import quality as bench_quality
from voicecli.errors import VoiceCliError
from voicecli.tts.kokoro import stages as kokoro_engine
from voicecli.tts.kokoro import torch_thread
from voicecli.tts.kokoro.phrases import CostModel, PhrasePlan
from voicecli.tts.kokoro.stages import (
    KOKORO_VERSION,
    CorpusStatistics,
    FixedStatistics,
    PooledStatistics,
    RecordingStatistics,
    StagedKokoro,
    check_model,
    resolve_precision,
)

TEXT = "Hello there, this is a test of the decoder."


@pytest.fixture(scope="module")
def utterance(tiny_synth):
    torch.manual_seed(7)
    return tiny_synth.stages.prepare(tiny_synth.phonemes(TEXT)[0].phonemes, tiny_synth.voice, 1.0)


def test_the_pinned_kokoro_is_installed():
    assert importlib.metadata.version("kokoro") == KOKORO_VERSION


def test_whole_decode_is_kokoros_own_forward_pass(tiny_synth):
    phonemes = tiny_synth.phonemes(TEXT)[0].phonemes
    pack = tiny_synth.voice
    torch.manual_seed(3)
    model = tiny_synth.stages.model
    stock = torch_thread.run(model, phonemes, pack[len(phonemes) - 1], 1.0).numpy()
    torch.manual_seed(3)  # the harmonic source is random: the same draws for both
    utt = tiny_synth.stages.prepare(phonemes, pack, 1.0)
    ours = tiny_synth.stages.decode(utt, 0, utt.frames)
    assert ours.shape == stock.shape
    # Weight norm folded in once instead of per call: float rounding only.
    np.testing.assert_allclose(ours, stock, atol=1e-5)


@pytest.mark.parametrize("ends", [[1, 2, 3, None], [16, 40, 41, None], [7, None]])
def test_parts_with_the_whole_statistics_are_exact_and_tile(tiny_synth, utterance, ends):
    engine = tiny_synth.stages
    whole = engine.decode(utterance, 0, utterance.frames)
    recorder = RecordingStatistics()
    engine.decode(utterance, 0, utterance.frames, recorder)
    stats = recorder.fixed()
    bounds = [0] + [e or utterance.frames for e in ends]
    parts = [
        engine.decode(utterance, a, b, stats) for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    assert [len(p) for p in parts] == [
        300 * (b - a) for a, b in zip(bounds, bounds[1:], strict=False)
    ]
    np.testing.assert_allclose(np.concatenate(parts), whole, atol=1e-4)


def test_parts_with_their_own_statistics_differ_but_tile(tiny_synth, utterance):
    engine = tiny_synth.stages
    whole = engine.decode(utterance, 0, utterance.frames)
    half = utterance.frames // 2
    stats = PooledStatistics()
    parts = [
        engine.decode(utterance, 0, half, stats),
        engine.decode(utterance, half, utterance.frames, stats),
    ]
    joined = np.concatenate(parts)
    assert len(joined) == len(whole)
    assert np.isfinite(joined).all()
    assert not np.allclose(joined, whole, atol=1e-4)  # the statistics do matter


def test_a_part_that_holds_the_statistics_continues_the_one_before_it_with_no_seam(
    tiny_synth, utterance
):
    engine = tiny_synth.stages
    stats = PooledStatistics()
    window = engine.decode(utterance, 0, 30, stats)
    stats.hold = True
    rest = engine.decode(utterance, 30, utterance.frames, stats)
    # One decode of both, normalised as the window was (over itself and its context).
    as_window = RecordingStatistics()
    engine.decode(utterance, 0, 30, as_window)
    both = engine.decode(utterance, 0, utterance.frames, as_window.fixed())
    np.testing.assert_allclose(np.concatenate([window, rest]), both, atol=1e-4)
    # Without holding, the rest is normalised over itself too: a seam.
    stats = PooledStatistics()
    engine.decode(utterance, 0, 30, stats)
    assert not np.allclose(engine.decode(utterance, 30, utterance.frames, stats), rest, atol=1e-3)


def test_a_voice_prior_is_where_a_first_part_is_normalised_from(tiny_synth, utterance):
    engine = tiny_synth.stages
    corpus = CorpusStatistics()
    corpus.samples = len(engine.decode(utterance, 0, utterance.frames, corpus))
    as_corpus = FixedStatistics(tuple((m, v) for v, m, _ in corpus.prior(1.0).moments))
    alone = engine.decode(utterance, 0, 30, PooledStatistics())
    # A prior that outweighs the part: normalised as the corpus was.
    heavy = engine.decode(utterance, 0, 30, PooledStatistics(corpus.prior(1e6)))
    np.testing.assert_allclose(heavy, engine.decode(utterance, 0, 30, as_corpus), atol=1e-4)
    # A light one moves it only part of the way from the part's own statistics.
    light = engine.decode(utterance, 0, 30, PooledStatistics(corpus.prior(0.1)))
    assert 0 < np.abs(light - alone).mean() < np.abs(heavy - alone).mean()


def test_a_second_engine_on_the_same_model_leaves_the_first_decoding_as_before(
    tiny_synth, utterance
):
    first = tiny_synth.stages
    recorder = RecordingStatistics()
    first.decode(utterance, 0, 30, recorder)
    held = recorder.fixed()  # the first 30 frames' statistics, for the whole
    before = first.decode(utterance, 0, utterance.frames, held)
    assert not np.allclose(first.decode(utterance, 0, utterance.frames), before, atol=1e-4)
    second = torch_thread.run(StagedKokoro, first.model)
    for engine in (first, second):
        np.testing.assert_allclose(
            engine.decode(utterance, 0, utterance.frames, held), before, atol=1e-5
        )


def test_bfloat16_convolutions_stay_close_to_float32_and_leave_float32_alone(tiny_synth, utterance):
    engine = tiny_synth.stages
    exact = engine.decode(utterance, 0, utterance.frames)
    fast = engine.decode(utterance, 0, utterance.frames, precision="bfloat16")
    assert fast.shape == exact.shape and np.isfinite(fast).all()
    assert not np.array_equal(fast, exact)  # the convolutions did run in bfloat16
    assert bench_quality.snr_db(exact, fast) > 35
    # A float32 decode after it is float32 again (the source is the utterance's own).
    np.testing.assert_array_equal(engine.decode(utterance, 0, utterance.frames), exact)


def test_a_bfloat16_front_keeps_the_durations_and_leaves_float32_alone(tiny_synth, utterance):
    engine, phonemes = tiny_synth.stages, tiny_synth.phonemes(TEXT)[0].phonemes
    torch.manual_seed(7)  # the utterance fixture's harmonic source
    fast = engine.prepare(phonemes, tiny_synth.voice, 1.0, "bfloat16")
    np.testing.assert_array_equal(fast.durations, utterance.durations)  # text stages: float32
    torch.testing.assert_close(fast.source, utterance.source, rtol=0, atol=0)
    assert not torch.equal(fast.x, utterance.x)  # the front's convolutions ran in bfloat16
    torch.testing.assert_close(fast.x, utterance.x, rtol=0.05, atol=0.05)
    torch.manual_seed(7)
    again = engine.prepare(phonemes, tiny_synth.voice, 1.0)
    torch.testing.assert_close(again.x, utterance.x, rtol=0, atol=0)


def test_auto_precision_is_bfloat16_only_where_the_cpu_computes_it(monkeypatch):
    monkeypatch.setattr(kokoro_engine, "native_bfloat16", lambda: True)
    assert resolve_precision("auto") == "bfloat16"
    monkeypatch.setattr(kokoro_engine, "native_bfloat16", lambda: False)
    assert resolve_precision("auto") == "float32"
    assert resolve_precision("bfloat16") == "bfloat16"
    with pytest.raises(VoiceCliError, match="auto, float32, bfloat16"):
        resolve_precision("float16")


def test_a_torch_that_cannot_say_whether_the_cpu_has_bfloat16_gets_float32(monkeypatch):
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    assert kokoro_engine.native_bfloat16() is False


def test_a_kokoro_laid_out_differently_is_refused(tiny_synth):
    class Stripped(torch.nn.Module):
        pass

    model = tiny_synth.stages.model
    saved = model.decoder.generator
    model.decoder.generator = Stripped()
    try:
        with pytest.raises(VoiceCliError, match=f"kokoro=={KOKORO_VERSION}"):
            check_model(model)
    finally:
        model.decoder.generator = saved


def test_the_quality_bench_aligns_a_cold_start_with_the_whole_render():
    whole = np.random.default_rng(0).standard_normal(24_000).astype(np.float32)
    part = whole[700:20_000]
    np.testing.assert_array_equal(bench_quality.aligned(whole, part), part)


@pytest.mark.long
def test_the_quality_bench_speaks_each_plan_through_the_shipped_executor(tiny_synth):
    text = "Here is a long first sentence, with a pause in it, and then some more words."
    whole, none = bench_quality.render(tiny_synth, text, None, seed=3)
    assert none == []  # Kokoro's own render: one pass, no planner
    slow = CostModel(rtf=3.0, per_call=0.05)  # nothing fits: a cold start must cut
    shipped, cuts = bench_quality.render(tiny_synth, text, PhrasePlan(cost=slow), seed=3)
    assert [c["kind"] for c in cuts][0] in ("pause", "window"), cuts
    assert cuts[-1]["kind"] in ("end", "speech end"), cuts
    one, cuts = bench_quality.render(tiny_synth, text, bench_quality.OnePass(cost=slow), seed=3)
    assert [c["kind"] for c in cuts] == ["end"]
    for spoken in (shipped, one):  # a cold start leaves out the lead-in, nothing else
        assert 0 <= len(whole) - len(spoken) < 0.5 * 24_000
        assert len(bench_quality.aligned(whole, spoken)) == len(spoken)


@pytest.fixture(scope="module")
def real_synth(real_model_dir):
    from voicecli.tts.kokoro.synthesizer import KokoroSynthesizer

    return KokoroSynthesizer(voice="jf_alpha", lang="a", model_dir=real_model_dir)


@pytest.mark.slow
def test_bfloat16_on_the_real_weights_differs_less_than_kokoro_from_itself(real_synth):
    engine = real_synth.stages
    phonemes = real_synth.phonemes("Here is a plan for your trip to Lisbon.")[0].phonemes
    torch.manual_seed(0)
    utt = engine.prepare(phonemes, real_synth.voice, 1.0)
    exact = engine.decode(utt, 0, utt.frames)
    torch.manual_seed(0)  # the same harmonic source, through a front in bfloat16
    fast_utt = engine.prepare(phonemes, real_synth.voice, 1.0, "bfloat16")
    generator = engine.decode(utt, 0, utt.frames, precision="bfloat16")
    fast = engine.decode(fast_utt, 0, fast_utt.frames, precision="bfloat16")
    torch.manual_seed(1)  # another random harmonic source: Kokoro's run-to-run difference
    other = engine.prepare(phonemes, real_synth.voice, 1.0)
    floor = engine.decode(other, 0, other.frames)
    floor_logmel = bench_quality.speech_logmel_db(exact, floor)  # 0.4 dB measured
    assert bench_quality.snr_db(exact, generator) > 35  # 42 dB measured
    assert bench_quality.speech_logmel_db(exact, generator) < floor_logmel / 4  # 0.07 dB
    assert bench_quality.snr_db(exact, fast) > 28  # 30-34 dB measured
    assert bench_quality.speech_logmel_db(exact, fast) < floor_logmel / 2.5  # 0.10-0.13 dB


@pytest.mark.slow
def test_pauses_of_the_real_model_are_quiet_word_boundaries(real_synth):
    synth = real_synth
    text = "After you restart the app, the connection error should be gone."
    torch.manual_seed(0)
    utt = synth.stages.prepare(synth.phonemes(text)[0].phonemes, synth.voice, 1.0)
    audio = synth.stages.decode(utt, 0, utt.frames)
    peak = np.abs(audio).max()
    pauses = utt.pauses()
    # The comma's pause, between "app" and "the" (the durations place words too early:
    # the cut may come up to 12 frames after the comma's frames).
    starts = 2 * np.concatenate([[0], np.cumsum(utt.durations)])
    comma = utt.tokens.index(",") + 1  # durations[0] is <bos>
    assert any(starts[comma] <= p <= starts[comma + 2] + 12 for p in pauses), (pauses, starts)
    for p in pauses:
        around = audio[300 * p - 150 : 300 * p + 150]
        assert np.abs(around).max() < 0.05 * peak, f"cut at frame {p} is not in a pause"
    # Kokoro's leading silence is silence: what a turn's first sentence leaves out.
    assert np.abs(audio[: 300 * utt.onset()]).max() < 0.01 * peak
    # So is everything after speech_end, which phrases mode gives as zeros; and the
    # speech does reach up to it (the last word's end is not cut off).
    end = utt.speech_end()
    assert end < utt.frames - 20
    assert np.abs(audio[300 * end :]).max() < 0.01 * peak
    assert np.abs(audio[300 * (end - 12) : 300 * end]).max() > 0.05 * peak


@pytest.mark.slow
def test_a_turn_continued_here_goes_on_as_it_would_have(real_synth):
    """A resident engine that dies mid-turn leaves the rest of the turn to the client's
    own synthesizer: its sentences must be laid out as the engine's would have been (the
    real weights' lead-in kept after a first sentence), or the sentence in progress
    resumes at the wrong sample."""
    from voicecli.cancel import CancelToken
    from voicecli.frames import Sentence
    from voicecli.timeline import Timeline

    def samples(sentences: list[Sentence]) -> dict[int, int]:
        counts: dict[int, int] = {}
        for chunk in real_synth.stream(sentences, CancelToken(), Timeline()):
            counts[chunk.sentence] = counts.get(chunk.sentence, 0) + len(chunk.samples)
        return counts

    turn = [Sentence(0, "Sure."), Sentence(1, "Here it is.")]
    whole = samples(turn)
    continued = samples(turn[1:])
    assert continued[1] == whole[1]
    assert samples([Sentence(0, turn[1].text)])[0] < whole[1]  # a turn's first: no lead-in
