#!/usr/bin/env bash
# Sourced by .ci/run (and by developers): gives PortAudio real output devices on a
# machine with no sound card.
#  - A PulseAudio null sink, paced in real time like a sound card.
#  - ALSA's default PCM goes to it through the pulse plugin.
#  - "voicecli_capture" plays through the same sink AND appends every sample the
#    device took to a raw float32 file (ALSA file plugin), so tests can check
#    what reached the device.
#  - A microphone: the default source is the monitor of a second null sink,
#    "voicecli_mic", so whatever a test plays into that sink (a user's utterance,
#    and the speakers' echo through module-loopback) is what voicecli hears.
# Exports PULSE_SERVER, ALSA_CONFIG_PATH, VOICECLI_CAPTURE and VOICECLI_AUDIO_DIR.
export VOICECLI_AUDIO_DIR="${VOICECLI_AUDIO_DIR:-/tmp/voicecli-audio}"
mkdir -p "$VOICECLI_AUDIO_DIR/run/pulse"
export XDG_RUNTIME_DIR="$VOICECLI_AUDIO_DIR/run"
export PULSE_SERVER="unix:$VOICECLI_AUDIO_DIR/run/pulse/native"
export VOICECLI_CAPTURE="$VOICECLI_AUDIO_DIR/capture.f32"

cat > "$VOICECLI_AUDIO_DIR/default.pa" <<PA
load-module module-native-protocol-unix auth-anonymous=1 socket=$VOICECLI_AUDIO_DIR/run/pulse/native
load-module module-null-sink sink_name=vsink rate=24000 channels=1 sink_properties=device.description=voicecli-null
set-default-sink vsink
PA

cat > "$VOICECLI_AUDIO_DIR/asound.conf" <<ALSA
pcm.!default { type pulse }
ctl.!default { type pulse }
# No plug here: a plug in front of the file plugin stops the pulse slave from
# running. So the file holds whatever PortAudio negotiated: float32 for voicecli.
pcm.voicecli_capture {
    type file
    slave.pcm "pulse"
    file "$VOICECLI_CAPTURE"
    format "raw"
    hint { show on; description "voicecli test device: pulse null sink + raw capture" }
}
ALSA
export ALSA_CONFIG_PATH="/usr/share/alsa/alsa.conf:$VOICECLI_AUDIO_DIR/asound.conf"

# Run as root (CI), PulseAudio schedules its sink threads in real time and sets a 200 ms
# real-time watchdog on itself, which the kernel enforces with SIGKILL: on a shared,
# noisy machine that is a way for the whole run's sound to vanish mid-run (CI lost
# PulseAudio once, 400 s into a run). The threads stay real-time; the watchdog goes.
cat > "$VOICECLI_AUDIO_DIR/daemon.conf" <<CONF
rlimit-rttime = -1
CONF

if ! pactl info >/dev/null 2>&1; then
    # Its exit status goes to the log too: a kill leaves no message of its own.
    (
        PULSE_CONFIG="$VOICECLI_AUDIO_DIR/daemon.conf" pulseaudio -n \
            -F "$VOICECLI_AUDIO_DIR/default.pa" --daemonize=no --exit-idle-time=-1 \
            --log-time=1 >"$VOICECLI_AUDIO_DIR/pulse.log" 2>&1
        echo "audio-env: pulseaudio exited with status $? at $(date -u +%T)" \
            >>"$VOICECLI_AUDIO_DIR/pulse.log"
    ) </dev/null >/dev/null 2>&1 & # holds no pipe of the caller's open (CI reads to its end)
    for _ in $(seq 50); do pactl info >/dev/null 2>&1 && break; sleep 0.1; done
    # An idle null sink stalls each new stream for 1-2 s, so keep it busy with
    # silence; with pacat's default 2 s buffer the sink would render in 2 s
    # slices and stall new streams just the same, hence the low latency.
    pacat --rate=24000 --channels=1 --format=s16le --latency-msec=10 /dev/zero \
        >/dev/null 2>&1 &
fi
pactl info >/dev/null 2>&1 || { echo "audio-env: PulseAudio did not start:" >&2; cat "$VOICECLI_AUDIO_DIR/pulse.log" >&2; }
# Here, not in default.pa, so that a PulseAudio started by an older version gets it too.
if ! pactl list short sinks 2>/dev/null | grep -q voicecli_mic; then
    pactl load-module module-null-sink sink_name=voicecli_mic rate=16000 channels=1 \
        sink_properties=device.description=voicecli-mic >/dev/null
    pactl set-default-source voicecli_mic.monitor
fi
