"""voicecli bench works end to end on the tiny model. These check that it measures, not
how fast anything is: timings on a busy CI machine mean nothing."""

from __future__ import annotations

import json
import re
import threading
import time
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from voicecli.bench.load import PacedListener, require_loopback
from voicecli.bench.metrics import trial_metrics
from voicecli.bench.scenarios import SCENARIOS, parse_reply, scenario_reply
from voicecli.cli.bench import bench
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.segment import Segmenter
from voicecli.timeline import (
    FIRST_TOKEN,
    PLAYED,
    QUEUED,
    REQUEST_SENT,
    SENTENCE_READY,
    SYNTH_FIRST_CHUNK,
    SYNTH_START,
    TEXT_DONE,
    TURN_END,
)

STAGE_EVENTS = (
    REQUEST_SENT,
    FIRST_TOKEN,
    SENTENCE_READY,
    SYNTH_START,
    SYNTH_FIRST_CHUNK,
    QUEUED,
    PLAYED,
    TEXT_DONE,
    TURN_END,
)


def invoke(*args: str):
    result = CliRunner().invoke(bench, list(args), catch_exceptions=False)
    return result


def tiny(tiny_model_dir) -> list[str]:
    return ["--model-dir", str(tiny_model_dir), "--voice", "af_tiny"]


# --- the A/B bench ------------------------------------------------------------------------
@pytest.mark.long
def test_the_bench_compares_both_modes_on_identical_text(tiny_model_dir, tmp_path):
    # A reply of two short sentences: five turns of it are synthesised (a third of the
    # short scenario's decoding; test_scenarios_have_the_promised_lengths checks those).
    text = tmp_path / "reply.txt"
    text.write_text("Hello there, friend. See you soon.")
    out = tmp_path / "out"
    result = invoke(
        "--trials",
        "2",
        "--text-file",
        str(text),
        "--tokens-per-second",
        "400",
        "--no-play",
        "--output-dir",
        str(out),
        *tiny(tiny_model_dir),
    )
    assert result.exit_code == 0, result.output
    assert "1st PLAYED" in result.output and "streaming" in result.output
    assert "Time to first audio" in result.output
    assert "not heard" in result.output

    run = json.loads((out / "bench-reply.json").read_text())
    assert run["output"]["played_means"] == "written"
    assert run["machine"]["cpu_count"] and run["voice"] == "af_tiny"
    assert run["llm"]["tokens_per_second"] == 400
    modes = [t["mode"] for t in run["trials"]]
    assert modes == ["streaming", "buffered", "streaming", "buffered"], "modes must alternate"
    assert run["warmup"] is not None and run["warmup"]["label"] == "warm-up"
    for trial in run["trials"]:
        assert trial["error"] is None
        names = {e["name"] for e in trial["timeline"]["events"]}
        assert set(STAGE_EVENTS) <= names, set(STAGE_EVENTS) - names
        assert all(s["samples"] > 0 for s in trial["sentences"])
    # Same reply, same sentences: only the handoff differed.
    assert {t["text"] for t in run["trials"]} == {run["text"]}
    sentences = {tuple(s["display"] for s in t["sentences"]) for t in run["trials"]}
    assert len(sentences) == 1
    assert run["summary"]["identical_text"]
    # Buffered releases its first sentence only after the last token.
    for trial in run["trials"]:
        m = trial_metrics(trial, run["sample_rate"], at_device=False)
        if trial["mode"] == "buffered":
            assert m["first_sentence"] >= m["text_done"]
        assert m["played"] >= m["queued"] >= m["first_chunk"] >= m["synth_start"]

    html = (out / "bench-reply.html").read_text()
    svgs = re.findall(r"<svg.*?</svg>", html, re.S)
    assert len(svgs) == 2
    for svg in svgs:
        ET.fromstring(svg)  # well-formed, so browsers draw it
    assert "http" not in html.split("<body>")[0], "the page must not load external assets"


def test_bench_plays_to_a_real_device(tiny_model_dir, tmp_path, capture_device):
    device, _ = capture_device
    text = tmp_path / "reply.txt"
    text.write_text("Hello there, friend. [[pause 0.3]] See you soon.")
    out = tmp_path / "out"
    result = invoke(
        "--trials",
        "1",
        "--text-file",
        str(text),
        "--tokens-per-second",
        "400",
        "--device",
        device,
        "--output-dir",
        str(out),
        *tiny(tiny_model_dir),
    )
    assert result.exit_code == 0, result.output
    run = json.loads((out / "bench-reply.json").read_text())
    assert run["output"]["played_means"] == "dac" and run["output"]["device"] == device
    assert run["llm"]["pauses"]
    for trial in run["trials"]:
        played = [e for e in trial["timeline"]["events"] if e["name"] == PLAYED]
        assert len(played) == len(trial["sentences"]) == 2


def test_user_errors_are_one_clear_line(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("   [[pause 1]]  ")
    result = invoke("--text-file", str(empty), "--no-play", "--output-dir", str(tmp_path))
    assert result.exit_code == 1 and "empty" in result.output
    result = invoke("load", "1,x", "--output-dir", str(tmp_path))
    assert result.exit_code == 1 and "--load" in result.output
    result = invoke(
        "load", "1", "--endpoint-url", "ws://10.1.2.3:8080", "--output-dir", str(tmp_path)
    )
    assert result.exit_code == 1 and "loopback" in result.output
    assert "Traceback" not in result.output


def test_each_bench_is_a_command_of_its_own_and_two_at_once_are_refused(tmp_path):
    listed = invoke("--help").output.split("Commands:")[1].split()
    for name in ("startup", "listen", "browser", "quality", "load", "isolation", "soak",
                 "turn-taking", "barge-in"):  # fmt: skip
        assert name in listed
    # The old mode flags: two at once is an error, not the first silently winning.
    result = CliRunner().invoke(bench, ["--startup", "--listen"])
    assert result.exit_code == 2 and "--startup and --listen: one bench at a time" in result.output
    # A command's options follow it; the A/B's before it are refused, not ignored.
    result = CliRunner().invoke(bench, ["--trials", "2", "startup"])
    assert result.exit_code == 2 and "--trials before `startup`" in result.output
    # An old flag still runs its bench, with a note of the new command.
    result = invoke("--load", "1,x", "--output-dir", str(tmp_path))
    assert "`voicecli bench --load` is now `voicecli bench load`" in result.output
    assert result.exit_code == 1 and "--load '1,x'" in result.output


# --- pieces -------------------------------------------------------------------------------
def test_scenarios_have_the_promised_lengths():
    counts = {}
    for name in SCENARIOS:
        segmenter = Segmenter()
        reply = scenario_reply(name)
        units = [u for token in reply.tokens for u in segmenter.feed(token)] + segmenter.flush()
        counts[name] = len(units)
    assert counts["short"] == 1
    assert 4 <= counts["medium"] <= 6
    assert counts["long"] >= 20 and "##" in scenario_reply("long").text
    assert scenario_reply("pauses").pauses


def test_pause_markers_become_pauses_before_the_next_token():
    reply = parse_reply("One two. [[pause 1.5]]Three.[[pause 9]]")
    assert "pause" not in reply.text and reply.text == "One two. Three."
    index = reply.tokens.index("Three")
    assert reply.pauses == {index: 1.5}  # the trailing pause delays nothing heard
    times = reply.token_times(10.0)
    assert times[index] - times[index - 1] == pytest.approx(1.6)
    with pytest.raises(VoiceCliError):
        parse_reply("a [[pause 600]] b")


def test_gaps_are_silence_between_one_sentence_end_and_the_next_start():
    rate = 24000
    t0 = 100.0
    events = [
        {"name": REQUEST_SENT, "t": t0, "sentence": None},
        {"name": PLAYED, "t": t0 + 1.0, "sentence": 0},
        {"name": PLAYED, "t": t0 + 3.0, "sentence": 1},  # 1 s of audio ended at +2.0
        {"name": PLAYED, "t": t0 + 4.0, "sentence": 2},
    ]  # on time
    trial = {
        "timeline": {"t0": t0, "events": events},
        "sentences": [{"index": i, "samples": n} for i, n in enumerate((rate, rate, rate))],
    }
    m = trial_metrics(trial, rate, at_device=True)
    assert m["played"] == pytest.approx(1000.0)
    assert m["gaps_ms"] == pytest.approx([1000.0, 0.0])
    assert m["audible_gaps"] == 1
    # Written, not played: a virtual playhead. Sentence 2 was written at +1.5, before
    # sentence 1 (played from +3.0) ended, so it waits and there is no gap.
    events[3]["t"] = t0 + 1.5
    m = trial_metrics(trial, rate, at_device=False)
    assert m["gaps_ms"] == pytest.approx([1000.0, 0.0])


def test_playhead_counts_late_frames_and_the_wait():
    head = PacedListener(24000)
    assert head.arrive(24000, 10.0) == 0.0  # first frame: starts the clock
    assert head.arrive(12000, 10.5) == 0.0  # plays at 11.0: early is fine
    assert head.arrive(12000, 12.0) == pytest.approx(0.5)  # needed at 11.5
    assert head.underruns == 1 and head.stall == pytest.approx(0.5)
    assert head.runs_out == pytest.approx(12.5)


def test_load_refuses_other_machines():
    assert require_loopback("ws://127.0.0.1:9000") == "127.0.0.1"
    assert require_loopback("ws://localhost:9000") == "localhost"
    assert require_loopback("ws://[::1]:9000") == "::1"
    for url in ("ws://example.com:8080", "ws://192.168.1.5:8080", "wss://0.0.0.0:1"):
        with pytest.raises(VoiceCliError, match="loopback"):
            require_loopback(url)


# --- load mode against a real `voicecli serve` ----------------------------------------------
def test_load_drives_a_real_server(tiny_model_dir, tmp_path):
    pytest.importorskip("uvicorn", reason="voicecli serve needs the server extra")
    text = tmp_path / "reply.txt"
    text.write_text("Hello there, friend. See you soon.")
    out = tmp_path / "out"
    before = {t.name for t in threading.enumerate()}
    result = invoke(
        "load",
        "1,2",
        "--turns",
        "1",
        "--text-file",
        str(text),
        "--tokens-per-second",
        "400",
        "--output-dir",
        str(out),
        "--trial-timeout",
        "120",
        *tiny(tiny_model_dir),
    )
    assert result.exit_code == 0, result.output
    assert "p50" in result.output
    data = json.loads((out / "load-reply.json").read_text())
    assert [lv["n"] for lv in data["levels"]] == [1, 2]
    for level in data["levels"]:
        assert len(level["conversations"]) == level["n"]
        s = level["stats"]
        assert s["turns_ok"] == s["turns"] == level["n"], s["error_samples"]
        assert s["ttfa_p50"] is not None and s["ttfa_p95"] >= s["ttfa_p50"]
        assert s["gap_max"] is not None
    assert data["server"]["kind"] == "subprocess"
    assert "knee_n" in data
    assert (out / "load-serve.log").read_text()
    leftover = {t.name for t in threading.enumerate()} - before
    assert not [n for n in leftover if n.startswith("bench-load")]


def test_a_server_whose_model_cannot_load_is_reported_at_once(tmp_path):
    pytest.importorskip("uvicorn", reason="voicecli serve needs the server extra")
    empty = tmp_path / "no-weights"
    empty.mkdir()
    started = time.monotonic()
    result = invoke("load", "1", "--scenario", "short", "--output-dir", str(tmp_path / "out"),
                    "--model-dir", str(empty), "--voice", "af_tiny")  # fmt: skip
    assert result.exit_code != 0
    assert "could not load" in result.output and "Traceback" not in result.output
    assert time.monotonic() - started < 120  # not the 300 s wait for a model that never comes


# --- isolation mode -------------------------------------------------------------------------
@pytest.mark.long
def test_isolation_measures_a_healthy_client_beside_each_hostile_one(
    tiny_model_dir, tmp_path, monkeypatch
):
    pytest.importorskip("uvicorn", reason="voicecli serve needs the server extra")
    # Its server speaks for the healthy client and a hostile one of its address, however
    # few listeners a loaded run would measure it can serve.
    monkeypatch.setenv("VOICECLI_LISTENERS", "2")
    text = tmp_path / "reply.txt"
    text.write_text("Hello there, friend. See you soon.")
    out = tmp_path / "out"
    result = invoke(
        "isolation", "--rounds", "1", "--random-requests", "100", "--text-file", str(text),
        "--tokens-per-second", "400", "--output-dir", str(out), "--trial-timeout", "120",
        *tiny(tiny_model_dir),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads((out / "isolation-reply.json").read_text())
    assert list(data["conditions"]) == [
        "alone", "non-reading", "flooding", "long-text", "flood-20"
    ]  # fmt: skip
    for name, condition in data["conditions"].items():
        s = condition["stats"]
        assert s["turns_ok"] == s["turns"] == 1, (name, s["errors"])
        assert s["ttfa_p50"] is not None
        if name != "alone":
            assert condition["hostile"][0]["sent"] > 0  # it really misbehaved
    memory = data["memory"]
    assert memory["sent"] == 100 and memory["after_mib"] > 0 and memory["before_mib"] > 0
    assert "vs alone" in result.output and "Server memory" in result.output


@pytest.mark.long
def test_a_soak_of_long_and_odd_texts_leaves_the_server_near_its_baseline(real_model_dir, tmp_path):
    """The short form of ``bench soak``, on the real weights: one pass over its odd
    texts. Before the server bounded them, 1999 dots were 61 s of audio and took a
    process to 3.5 GB."""
    pytest.importorskip("uvicorn", reason="voicecli serve needs the server extra")
    from voicecli.bench.soak import GOAL_MIB, MIX, run_soak

    settings = Settings(voice="jf_alpha", lang="a", model_dir=real_model_dir)
    short = MIX[: [kind for kind, _ in MIX].index("unbroken-word") + 1]  # to the first long text
    result = run_soak(
        settings, seconds=0, idle=2, output_dir=tmp_path, progress=lambda _: None, mix=short
    )
    kinds = {r["kind"]: r["ended"] for r in result["requests"]}
    assert len(result["requests"]) == len(short)
    assert kinds["dots"] == kinds["emoji"] == "error: bad_request"  # refused, as the CLI does
    assert kinds["unbroken-word"] == "spoken"
    assert result["grown_mib"] <= GOAL_MIB, (result["peak_mib"], result["grown_mib"])


def test_cpu_load_runs_busy_processes_in_their_own_session_and_stops_them():
    import os

    from voicecli.bench.cpu_load import busy_processes, cpu_load
    from voicecli.bench.machine import machine_info

    with cpu_load(2) as pids:
        assert len(pids) == 2 and busy_processes() == 2
        assert machine_info()["cpu_load"] == 2
        time.sleep(0.5)
        for pid in pids:
            assert os.getsid(pid) == pid != os.getsid(0)  # another terminal's, as it were
            with open(f"/proc/{pid}/stat") as f:
                assert f.read().rsplit(")", 1)[1].split()[0] == "R"  # running, not waiting
    assert busy_processes() == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_word_error_rate_counts_words_not_their_spelling():
    from voicecli.bench.wer import wer, words

    said = "the train leaves every twenty minutes ok"
    assert words("The train leaves every 20 minutes, OK?") == said
    assert wer(["the train leaves at noon"], ["The train leaves at noon."]) == 0.0
    assert wer(["a b c d"], ["a b x d"]) == 0.25
    assert wer(["a b", "c d"], ["a b", ""]) == 0.5  # nothing heard: every word deleted
