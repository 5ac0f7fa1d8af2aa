"""All of voicecli's torch work runs on one thread, whoever asks for it.

Each thread that enters an OpenMP parallel region gets a team of worker threads that
lives as long as it does; two teams on a 2-core machine make libgomp sleep at every
barrier (voicecli/tts/kokoro/torch_thread.py). These tests count the teams by their threads.
"""

from __future__ import annotations

import os
import threading

import pytest

from voicecli.tts.kokoro import torch_thread


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_every_caller_runs_on_the_same_thread_which_is_none_of_theirs():
    seen: list[tuple[int, int]] = []

    def ask() -> None:
        seen.append((threading.get_ident(), torch_thread.run(threading.get_ident)))

    callers = [threading.Thread(target=ask) for _ in range(4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    ask()
    runner = {ran for _, ran in seen}
    assert len(seen) == 5 and len(runner) == 1
    assert runner.isdisjoint(caller for caller, _ in seen)


def test_the_result_or_the_exception_comes_back_and_a_nested_call_does_not_wait_for_itself():
    assert torch_thread.run(lambda a, b=0: a + b, 2, b=3) == 5
    with pytest.raises(ZeroDivisionError):
        torch_thread.run(lambda: 1 / 0)
    assert torch_thread.run(lambda: torch_thread.run(lambda: "inner")) == "inner"


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_synthesizing_from_many_threads_starts_no_openmp_team_of_their_own(tiny_model_dir):
    from voicecli.tts.kokoro.synthesizer import KokoroSynthesizer

    try:
        # A team of 2 per thread that computes.
        synth = KokoroSynthesizer(voice="af_tiny", model_dir=tiny_model_dir, threads=2)
        for _ in synth.speaker().speak("Warm."):
            pass  # torch's thread has its team now
        done, hold = threading.Barrier(4), threading.Event()

        def speak() -> None:
            for _ in synth.speaker().speak("A sentence from another thread."):
                pass
            done.wait()
            hold.wait()  # alive, so that a team of its own would still be there

        callers = [threading.Thread(target=speak) for _ in range(3)]
        idle = os_threads()
        try:
            for t in callers:
                t.start()
            done.wait(timeout=120)
            during = os_threads()
        finally:
            hold.set()
            for t in callers:
                t.join()
    finally:
        torch_thread.configure(None)
    # The three callers themselves, and no OpenMP worker for any of them.
    assert during - idle == 3
