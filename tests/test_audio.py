"""Ring buffer, and real sounddevice playback on the test ALSA device."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys
import threading
import time
import wave

import numpy as np
import pytest

from voicecli.audio.player import Player
from voicecli.audio.ring import RingBuffer
from voicecli.cancel import CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import AudioChunk

RATE = 24_000


def tone(seconds: float, freq: float = 440.0, amp: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def read_capture(path) -> np.ndarray:
    return np.fromfile(path, dtype="<f4")


# --- ring buffer ---------------------------------------------------------------------
def test_ring_wraps_around_and_keeps_order():
    ring = RingBuffer(10)
    out = np.zeros(4, np.float32)
    got = []
    for start in range(0, 40, 4):
        assert ring.write(np.arange(start, start + 4, dtype=np.float32)) == 4
        n, _ = ring.read_into(out)
        got.extend(out[:n])
    assert got == list(range(40))


def test_ring_write_blocks_when_full_until_read():
    ring = RingBuffer(8)
    ring.write(np.ones(8, np.float32))
    done = threading.Event()

    def writer():
        ring.write(np.ones(4, np.float32))
        done.set()

    threading.Thread(target=writer, daemon=True).start()
    assert not done.wait(0.2), "a full ring must make the writer wait (backpressure)"
    ring.read_into(np.zeros(4, np.float32))
    assert done.wait(2.0)


def test_ring_clear_and_cancel_release_a_blocked_writer():
    ring = RingBuffer(8)
    ring.write(np.ones(8, np.float32))
    written = []
    t = threading.Thread(target=lambda: written.append(ring.write(np.ones(4, np.float32))))
    t.start()
    time.sleep(0.1)
    assert ring.clear() == 8
    t.join(2.0)
    assert written == [0] and ring.available == 0

    ring.write(np.ones(8, np.float32))
    cancel = CancelToken()
    t = threading.Thread(target=lambda: written.append(ring.write(np.ones(4, np.float32), cancel)))
    t.start()
    time.sleep(0.1)
    cancel.cancel()
    t.join(2.0)
    assert written[-1] == 0


def test_ring_read_from_empty_is_zero_not_a_block():
    ring = RingBuffer(8)
    n, pos = ring.read_into(np.zeros(4, np.float32))
    assert (n, pos) == (0, 0)


# --- real device ---------------------------------------------------------------------
def test_samples_reaching_the_device_match_what_was_written(capture_device, tiny_synth):
    device, capture = capture_device
    speech = np.concatenate(list(tiny_synth.speaker().speak("Hello there.")))
    played: list[tuple[int, float]] = []
    player = Player(RATE, device=device, blocksize=480)
    player.begin_turn(lambda s, t: played.append((s, t)), None)
    try:
        start = time.monotonic()
        player.write(AudioChunk(0, speech, last=True))
        assert player.drain(timeout=30)
        elapsed = time.monotonic() - start
    finally:
        player.close()
    got = read_capture(capture)
    assert np.flatnonzero(got).size, "nothing reached the device"
    # Align on the first non-zero sample; the device got silence before it.
    start = np.flatnonzero(got)[0] - np.flatnonzero(speech)[0]
    assert start >= 0 and len(got) - start >= len(speech)
    # Exact: float32 all the way from the ring to the device, no resampling.
    np.testing.assert_array_equal(got[start : start + len(speech)], speech)
    assert [s for s, _ in played] == [0]
    # Paced like a sound card: playing takes about as long as the audio lasts.
    assert elapsed >= 0.8 * len(speech) / RATE


def test_clear_silences_the_stream_within_one_block(capture_device):
    device, capture = capture_device
    blocksize = 480
    player = Player(RATE, device=device, blocksize=blocksize)
    try:
        player.write(AudioChunk(0, tone(3.0)))
        time.sleep(0.5)
        consumed_before = player.ring.read_pos
        player.clear()
        time.sleep(0.4)  # the stream keeps running: it must be playing silence now
        assert not player.stalled(), "the stream stopped calling back"
        assert player.ring.available == 0
    finally:
        player.close()
    got = read_capture(capture)
    nonzero = np.flatnonzero(np.abs(got) > 1e-6)
    # Everything after the clear is silence: at most one block more of tone went
    # out than the callback had taken before clear() returned.
    tone_out = nonzero[-1] - nonzero[0] + 1
    assert tone_out <= consumed_before + blocksize, (tone_out, consumed_before)
    assert len(got) > nonzero[-1] + RATE * 0.2, "the stream stopped instead of playing silence"


def test_underrun_plays_silence_and_is_counted(capture_device):
    device, _ = capture_device
    player = Player(RATE, device=device, blocksize=480)
    try:
        player.write(AudioChunk(0, tone(0.1)))
        time.sleep(0.5)  # the synthesizer is "late": the ring runs dry
        assert player.underruns == 1, "one dry spell is one underrun"
        assert not player.stalled(), "the stream stopped calling back"
        player.write(AudioChunk(0, tone(0.1), offset=2400, last=True))
        assert player.drain(timeout=10)
    finally:
        player.close()


def test_unknown_device_suggests_output_file(capture_device):
    with pytest.raises(VoiceCliError, match="--output"):
        Player(RATE, device="no such device 42")
    with pytest.raises(VoiceCliError, match="--output"):
        Player(RATE, device="999")


def test_wav_file_and_wire_carry_the_same_int16_samples(tmp_path):
    from voicecli import protocol as p
    from voicecli.audio.wav import WavWriter

    samples = np.array([-1.5, -1.0, -0.5, -1e-6, 0.0, 0.3, 0.5, 1.0, 2.0, np.nan], np.float32)
    writer = WavWriter(tmp_path / "x.wav", RATE)
    writer.write(samples)
    writer.close()
    with wave.open(str(tmp_path / "x.wav"), "rb") as f:
        in_file = np.frombuffer(f.readframes(f.getnframes()), "<i2")
    on_wire = p.decode_server_frame(p.encode_audio_frame("r", 0, p.to_pcm16(samples))).pcm
    np.testing.assert_array_equal(in_file, np.frombuffer(on_wire, "<i2"))
    # Full scale is symmetric, out-of-range samples clip, and NaN is silence.
    assert in_file.tolist() == [-32767, -32767, -16384, 0, 0, 9830, 16384, 32767, 32767, 0]


ALSA_ERROR = """
import ctypes, ctypes.util, logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(name)s %(message)s")
if sys.argv[1] == "voicecli":
    from voicecli.audio.devices import sounddevice_module
    sounddevice_module()
else:
    import sounddevice
alsa = ctypes.CDLL(ctypes.util.find_library("asound"))
alsa.snd_pcm_open(ctypes.byref(ctypes.c_void_p()), b"no-such-device", 0, 0)
"""


@pytest.mark.parametrize("opened_by", ["voicecli", "sounddevice"])
def test_alsa_talks_to_the_log_not_the_terminal(opened_by):
    """ALSA prints its own lines ("underrun occurred" on a busy machine) on stderr, in the
    middle of the live view; voicecli sends them to its log. Opened by sounddevice alone,
    the same error reaches stderr: the test sees the difference it makes."""
    if ctypes.util.find_library("asound") is None:
        pytest.skip("no ALSA on this machine")
    proc = subprocess.run(
        [sys.executable, "-c", ALSA_ERROR, opened_by], capture_output=True, text=True, timeout=60
    )
    if opened_by == "voicecli":
        assert proc.stderr == "", proc.stderr
        assert "voicecli.audio.alsa ALSA pcm.c" in proc.stdout and "Unknown PCM" in proc.stdout
    else:
        assert "ALSA lib pcm.c" in proc.stderr and "Unknown PCM no-such-device" in proc.stderr
