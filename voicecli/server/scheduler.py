"""The model, loaded in the background, and one worker thread that serves every client
of the server in turn.

* A client (``Listener``) is one WebSocket connection, or one HTTP request. Its speak
  requests (``Job``) run in order. The worker runs one forward pass at a time (a
  phrase's text stages, or one part of its audio: see ``voicecli.tts.kokoro.phrases``), each
  time for the listener with the least audio queued (on its playhead, or in its outbox
  if more), ties in turn: so the client about to fall silent goes first, and a client
  with a long text, a deep queue or no reading gets ahead only while nobody else needs
  the model. A newcomer waits for the pass in progress, so a part is kept to
  ``Limits.shared_part_seconds`` of decoding where a pause allows, while others wait or
  while the listener has ``Limits.short_parts_ahead`` of audio in hand anyway; and a
  phrase's text stages and its first part are two passes, which go together unless
  another listener has no audio at all while this one has some.
* Text becomes phonemes on a thread of its own, as requests arrive, so that one
  client's text processing never waits behind another's synthesis.
* The worker adds audio to a listener's outbox only while the client keeps reading it.
  A client that has read nothing for ``Limits.stall_timeout`` with audio waiting is
  ended (``slow_consumer``), and frees its turn.
* Admission is fair: each client has a share of its own (``max_pending_per_session``
  unanswered requests per connection, ``max_pending_per_address`` per address beyond
  this machine), so a client that floods fills only its own share (``overloaded``). And
  the server speaks for as many listeners as its model keeps up with in real time
  (``capacity``, from the audio it makes per second of work): the next listener is told
  at once that it is ``busy``, and how many are being served, rather than every one of
  them falling behind.
* Bounded: ``Limits.audio_budget`` of audio per job (what its text may take to say): a
  job that runs past it is cut, and its ``sentence_done`` says ``truncated``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from voicecli import protocol as p
from voicecli.cancel import POLL, CancelToken
from voicecli.errors import VoiceCliError
from voicecli.frames import Word
from voicecli.memory import release_free_memory
from voicecli.server.outbox import Outbox
from voicecli.server.requests import Limits, split_sentences
from voicecli.tts.steps import AudioPart, Speaker, SpeechModel, Step, TextStaged

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Job:
    """One speak request. ``finished`` is touched on the loop only; ``chunks``, ``error``
    and ``audio`` by the scheduler's threads."""

    request_id: str
    text: str
    voice: str | None
    speed: float | None
    outbox: Outbox
    on_finish: Callable[[Job], None] = lambda job: None
    words: bool = False  # the client asked for word timings
    cancel: CancelToken = field(default_factory=CancelToken)
    finished: bool = False
    chunks: list[Any] | None = None  # phonemes, once the text stage is done
    error: tuple[str, str] | None = None  # (code, message) from the text stage
    steps: Generator[Step, None, None] | None = None
    frames: int = 0
    samples: int = 0

    def _finish(self, message: dict[str, Any]) -> None:
        if self.finished:
            return
        self.finished = True
        self.cancel.cancel("finished")  # the worker drops it at its next step
        self.outbox.put_control(message)
        self.on_finish(self)

    def complete(self, truncated: bool = False) -> None:
        self._finish(
            p.control(
                p.SENTENCE_DONE,
                request_id=self.request_id,
                frames=self.frames,
                samples=self.samples,
                cancelled=False,
                **({"truncated": True} if truncated else {}),
            )
        )

    def fail(self, code: str, message: str) -> None:
        self._finish(p.control(p.ERROR, code=code, message=message, request_id=self.request_id))

    def cancel_now(self) -> None:
        if self.finished:
            return
        self.outbox.drop(self.request_id)
        self._finish(
            p.control(
                p.SENTENCE_DONE, request_id=self.request_id, frames=0, samples=0, cancelled=True
            )
        )


@dataclass(eq=False)
class Listener:
    """One client: its jobs in order, its outbox, and its speaker (its playhead)."""

    outbox: Outbox
    peer: str = "local"  # where it connects from: an address, or the engine's own socket
    remote: bool = False  # from beyond this machine: its address's clients share a share
    jobs: deque[Job] = field(default_factory=deque)
    speaker: Speaker | None = None
    closed: bool = False
    admitted: bool = False  # spoken for: one of the listeners served in real time
    admitted_at: float = 0.0
    worked_at: float = 0.0  # when it last had a job
    asked_at: float = 0.0  # when it last asked for one, given or refused


class Throughput:
    """Seconds of audio the model makes per second of work, averaged over its recent
    work; None until it has worked ``TRUSTED`` seconds (a process's first passes are
    slower than the rest, and would make it look slower than it is)."""

    SPAN = 20.0  # seconds of work the average reaches back
    TRUSTED = 10.0

    def __init__(self) -> None:
        self._work = 0.0
        self._audio = 0.0
        self._worked = 0.0  # in all

    def observe(self, work: float, audio: float) -> None:
        decay = max(0.0, 1.0 - work / self.SPAN) if self._work >= self.SPAN else 1.0
        self._work = self._work * decay + work
        self._audio = self._audio * decay + audio
        self._worked += work

    @property
    def realtime(self) -> float | None:
        if self._worked < self.TRUSTED or self._audio <= 0:
            return None
        return self._audio / self._work


class Scheduler:
    def __init__(self, factory: Callable[[], SpeechModel], limits: Limits) -> None:
        self._factory = factory
        self.limits = limits
        self._listeners: deque[Listener] = deque()  # in turn order
        self._departed: list[Job] = []  # jobs of clients that left, for the worker to close
        self._prepared: Listener | None = None  # whose text stages the last pass was
        self._work = threading.Condition()
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._text_thread: threading.Thread | None = None
        self.model: SpeechModel | None = None
        self.load_error: str | None = None
        self.ready = threading.Event()  # the model is loaded
        self._settled = threading.Event()  # loaded, or failed to
        self._worked_at: float | None = None  # the last step, until memory is released
        self._idle_since = 0.0  # when the worker last had a job (or the model loaded)
        self.warm = threading.Event()  # the model has been warmed up
        self._warming: Iterator[None] | None = None  # its warm-up, under way
        self._warm_began = 0.0
        self.throughput = Throughput()

    @property
    def clients(self) -> int:
        """Clients connected now (WebSocket sessions and HTTP requests)."""
        with self._work:
            return len(self._listeners)

    # --- the loop's side --------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread = threading.Thread(target=self._main, name="voicecli-server", daemon=True)
        self._thread.start()
        self._text_thread = threading.Thread(
            target=self._text_main, name="voicecli-g2p", daemon=True
        )
        self._text_thread.start()

    def stop(self) -> None:
        with self._work:
            self._stopping = True
            self._work.notify_all()
        for thread in (self._thread, self._text_thread):
            if thread is not None:
                thread.join(timeout=5)

    @property
    def capacity(self) -> int:
        """Listeners it can speak for at once in real time."""
        limits = self.limits
        if limits.listeners is not None:
            return limits.listeners
        realtime = self.throughput.realtime
        if realtime is None:
            return min(limits.listeners_before_measuring, limits.max_listeners)
        return max(1, min(limits.max_listeners, int(realtime * limits.realtime_margin)))

    def listener(self, outbox: Outbox, peer: str = "local", remote: bool = False) -> Listener:
        """A client; ``peer``: where it connects from (``remote``: beyond this machine)."""
        listener = Listener(outbox, peer, remote)
        with self._work:
            self._listeners.append(listener)
        return listener

    def leave(self, listener: Listener) -> None:
        """The client is gone: its jobs are cancelled and it leaves the turn order."""
        with self._work:
            listener.closed = True
            jobs = list(listener.jobs)
            listener.jobs.clear()
            self._departed.extend(jobs)  # their synthesis stops at the worker's next step
            if listener in self._listeners:
                self._listeners.remove(listener)
            self._work.notify_all()
        for job in jobs:
            job.cancel_now()

    def submit(self, listener: Listener, job: Job) -> None:
        if self.load_error is not None:
            raise p.ProtocolError(
                p.SYNTHESIS_FAILED, f"the model failed to load: {self.load_error}", job.request_id
            )
        with self._work:
            self._admit(listener, job.request_id)
            listener.jobs.append(job)
            listener.worked_at = time.monotonic()
            self._work.notify_all()

    def _admit(self, listener: Listener, request_id: str) -> None:
        """Refuse ``listener`` a new job beyond its address's share of the queue, or
        beyond the listeners the model can serve in real time (lock held). When every
        place is taken, the address holding the most gives up its newest if it holds two
        more than this one's, or one more while more of its clients ask than this one's:
        no address locks the others out (twenty connections holding the only place
        yield it to one from elsewhere, which they cannot take back), a place is not
        passed to and fro between equals, and one address alone may take them all."""
        limits = self.limits
        if listener.remote:
            pending = sum(len(o.jobs) for o in self._listeners if o.peer == listener.peer)
            if pending >= limits.max_pending_per_address:
                raise p.ProtocolError(
                    p.OVERLOADED,
                    f"{pending} requests from {listener.peer} are unanswered; wait for "
                    "their replies before sending more",
                    request_id,
                )
        now = time.monotonic()
        listener.asked_at = now
        if listener.admitted:
            return
        # A client that has not taken its audio for the grace needs no model time: it keeps
        # no place from the others (until it reads again, or the stall ends it).
        served = [
            other
            for other in self._listeners
            if other.admitted
            and (other.jobs or now - other.worked_at < limits.listener_grace)
            and not (
                other.outbox.waiting_audio and now - other.outbox.last_taken > limits.listener_grace
            )
        ]
        for other in self._listeners:  # a place kept past its grace is free again
            if other.admitted and other not in served:
                other.admitted = False
        if len(served) >= self.capacity:
            held: dict[str, list[Listener]] = {}
            for other in served:
                held.setdefault(other.peer, []).append(other)
            mine = len(held.get(listener.peer, []))
            most = max(held.values(), key=len)
            if len(most) <= mine or (
                len(most) == mine + 1
                and self._asking(most[0].peer, now) <= self._asking(listener.peer, now)
            ):
                raise p.ProtocolError(
                    p.BUSY,
                    f"busy: it speaks for {len(served)} listeners, as many as it can in real "
                    "time; retry in a moment",
                    request_id,
                )
            self._revoke(most[-1])
        listener.admitted = True
        listener.admitted_at = now

    def _asking(self, peer: str, now: float) -> int:
        """Clients of ``peer`` that asked for a job lately (lock held)."""
        grace = self.limits.listener_grace
        return sum(1 for o in self._listeners if o.peer == peer and now - o.asked_at < grace)

    def _revoke(self, listener: Listener) -> None:
        """``listener`` gives its place up: the job in progress finishes, the rest are
        refused as busy (lock held)."""
        listener.admitted = False
        waiting = [job for job in listener.jobs if job.steps is None]
        for job in waiting:
            listener.jobs.remove(job)
            self._departed.append(job)
            message = "busy: its place went to a listener from another address; retry later"
            self._on_loop(job.fail, p.BUSY, message)

    # --- the text stage's thread ------------------------------------------------------
    def _text_main(self) -> None:
        self._settled.wait()
        while True:
            with self._work:
                job = self._next_text_job()
                while job is None and not self._stopping:
                    self._work.wait(POLL)
                    job = self._next_text_job()
                if self._stopping:
                    return
            self._phonemize(job)
            with self._work:
                self._work.notify_all()

    def _next_text_job(self) -> Job | None:
        """The first job still in text, of the client with the fewest jobs ready to
        speak (lock held): one client's deep queue never delays another's text."""
        best: tuple[int, Job] | None = None
        for listener in self._listeners:
            waiting = [j for j in listener.jobs if j.chunks is None and j.error is None]
            waiting = [j for j in waiting if not j.cancel.cancelled]
            if not waiting:
                continue
            ready = sum(1 for j in listener.jobs if j.chunks is not None)
            if best is None or ready < best[0]:
                best = (ready, waiting[0])
        return best[1] if best is not None else None

    def _phonemize(self, job: Job) -> None:
        if self.model is None:
            job.error = (p.SYNTHESIS_FAILED, f"the model failed to load: {self.load_error}")
            # No worker is left to report it (it ends when loading fails): reply now.
            self._on_loop(job.fail, *job.error)
            return
        try:
            job.chunks = [c for s in split_sentences(job.text) for c in self.model.phonemes(s)]
        except Exception as exc:  # noqa: BLE001 - one bad text must not stop the stage
            log.warning("text stage failed for request %s: %r", job.request_id, exc)
            job.error = (p.SYNTHESIS_FAILED, f"could not read the text: {type(exc).__name__}")

    # --- the worker thread ------------------------------------------------------------
    def _main(self) -> None:
        try:
            self.model = self._factory()
        except Exception as exc:  # noqa: BLE001 - reported through /ping and every request
            self.load_error = str(exc) if isinstance(exc, VoiceCliError) else repr(exc)
            log.error("model failed to load: %s", self.load_error)
            self._settled.set()  # the text stage fails what it holds and what comes
            return
        self._idle_since = time.monotonic()
        self.ready.set()
        self._settled.set()
        log.info("model loaded; serving")
        while True:
            with self._work:
                if self._stopping:
                    return
                departed, self._departed = self._departed, []
            for job in departed:
                if job.steps is not None:
                    job.steps.close()  # the worker's thread: never while it runs
            with self._work:
                turn = self._next_turn()
                if turn is None:
                    self._work.wait(POLL)
            if turn is None:
                self._warm_up_when_idle()
                self._release_when_idle()
                continue
            self._step(*turn)
            self._worked_at = self._idle_since = time.monotonic()

    def _warm_up_when_idle(self) -> None:
        """One step of the model's warm-up, once nobody has had a job for
        ``warm_after``: a client that arrives meanwhile waits for one pass at most. The
        client that started an engine is served first, cold (a first pass is about 0.2 s
        slower), before any of it."""
        if self.warm.is_set() or time.monotonic() - self._idle_since < self.limits.warm_after:
            return
        with self._work:
            if any(listener.jobs for listener in self._listeners):
                self._idle_since = time.monotonic()  # in the text stage: not idle
                return
        assert self.model is not None
        if self._warming is None:
            self._warming, self._warm_began = self.model.warm_up_steps(), time.monotonic()
        try:
            next(self._warming)
            self._worked_at = time.monotonic()  # memory is given back after it, not amid
            return
        except StopIteration:
            log.info("warmed up in %.2f s", time.monotonic() - self._warm_began)
        except Exception as exc:  # noqa: BLE001 - the next request will say what is wrong
            log.warning("warm-up failed: %r", exc)
        self._warming = None
        self.warm.set()
        self._worked_at = time.monotonic()

    def _release_when_idle(self) -> None:
        """Give freed memory back once no job has run for ``release_after``: a request
        that arrives meanwhile waits for it (at most about 0.2 s)."""
        if self._worked_at is None:
            return
        if time.monotonic() - self._worked_at >= self.limits.release_after:
            self._worked_at = None
            release_free_memory()

    def _next_turn(self) -> tuple[Listener, Job, bool] | None:
        """The listener to serve next, its first job, and whether anyone else is waiting
        (lock held): a job to drop goes first, then whoever has the least audio queued."""
        now = time.monotonic()
        ready: list[tuple[float, Listener, Job]] = []
        for listener in self._listeners:
            if not listener.jobs:
                continue
            job = listener.jobs[0]
            if job.cancel.cancelled or job.error is not None:
                ready = [(-1.0, listener, job)]
                break
            if job.chunks is None:
                continue  # still in the text stage
            if not listener.outbox.has_room:
                if now - listener.outbox.last_taken > self.limits.stall_timeout:
                    self._on_loop(self._end_stalled, listener)
                continue
            queued = listener.speaker.ahead() if listener.speaker is not None else 0.0
            # Audio the client has not even taken is queued for it, whatever its playhead
            # says: a client that stops reading falls behind those that read.
            unread = listener.outbox.waiting_audio * self.limits.frame_samples / p.SAMPLE_RATE
            ready.append((max(queued, unread), listener, job))
        if not ready:
            return None
        # A text stage and the first part after it go together, unless someone else has
        # run out of audio (or never had any) while this listener has some in hand: only
        # they cannot wait for both. Between two silent listeners, the part goes first,
        # as it is one pass from sound, where the other is a text stage and a part.
        after = [item for item in ready if item[1] is self._prepared]
        silent = any(item[0] <= 0.0 for item in ready if item[1] is not self._prepared)
        queued, listener, job = (
            after[0]
            if after and (after[0][0] <= 0.0 or not silent)
            else min(ready, key=lambda item: item[0])
        )  # min: the first of equals
        self._listeners.remove(listener)
        self._listeners.append(listener)  # whoever goes now goes last among equals
        # Short parts cost a little more decoding each, and nothing to a client with
        # audio in hand; whoever arrives while a part is decoded waits for all of it.
        short = len(ready) > 1 or queued >= self.limits.short_parts_ahead
        return listener, job, short

    def _step(self, listener: Listener, job: Job, short: bool) -> None:
        """One forward pass for ``job``, or its end; a short one if ``short``."""
        self._prepared = None
        if job.cancel.cancelled or job.error is not None:
            if job.error is not None:
                self._on_loop(job.fail, *job.error)
            self._drop(listener, job)
            return
        assert self.model is not None and job.chunks is not None
        try:
            if job.steps is None:
                if listener.speaker is None:
                    listener.speaker = self.model.speaker()
                job.steps = listener.speaker.speak_steps(
                    job.chunks, job.cancel, voice=job.voice, speed=job.speed
                )
            listener.speaker.limit_parts(self.limits.shared_part_seconds if short else None)
            began = time.monotonic()
            step = next(job.steps)
            listener.worked_at = done = time.monotonic()
        except StopIteration:
            self._on_loop(job.complete)
            self._drop(listener, job)
            return
        except VoiceCliError as exc:  # e.g. a voice not in the voice set: the client's to fix
            self._on_loop(job.fail, p.BAD_REQUEST, str(exc))
            self._drop(listener, job)
            return
        except Exception as exc:  # noqa: BLE001 - one bad request must not stop the worker
            log.warning("synthesis failed for request %s: %r", job.request_id, exc)
            self._on_loop(job.fail, p.SYNTHESIS_FAILED, f"synthesis failed: {type(exc).__name__}")
            self._drop(listener, job)
            return
        match step:
            case TextStaged(words=words):
                self.throughput.observe(done - began, 0.0)
                self._prepared = listener
                if job.words and words:
                    self._send_words(listener, job, words)
                # Someone silent may go before the part that follows.
            case AudioPart(samples=audio):
                self.throughput.observe(done - began, len(audio) / self.model.sample_rate)
                self._send_audio(listener, job, audio)

    def _send_audio(self, listener: Listener, job: Job, audio: np.ndarray) -> None:
        """A part's audio, as frames, within the job's budget (which ends it)."""
        assert self.model is not None
        budget = int(self.limits.audio_budget(job.text, job.speed) * self.model.sample_rate)
        cut = job.samples + len(audio) >= budget
        audio = audio[: max(0, budget - job.samples)]
        size = self.limits.frame_samples
        frames = []
        for start in range(0, len(audio), size):
            pcm = p.to_pcm16(audio[start : start + size])
            frames.append(p.encode_audio_frame(job.request_id, job.frames + len(frames), pcm))
        job.frames += len(frames)
        job.samples += len(audio)
        listener.outbox.put_audio(job.request_id, frames)
        if cut:
            log.warning(
                "request %s cut at %.1f s of audio, the most its %d characters may take",
                job.request_id,
                job.samples / self.model.sample_rate,
                len(job.text),
            )
            self._on_loop(job.complete, True)
            self._drop(listener, job)

    def _send_words(self, listener: Listener, job: Job, words: tuple[Word, ...]) -> None:
        """Words timed from the job's first sample: ``speak_steps`` times them from the
        start of its chunks, which are the job's."""
        message = p.control(
            p.WORDS,
            request_id=job.request_id,
            format=p.WORDS_FORMAT,
            words=p.encode_words((w.text, w.start, w.end) for w in words),
        )
        listener.outbox.put_control(message)

    def _drop(self, listener: Listener, job: Job) -> None:
        if job.steps is not None:
            job.steps.close()
        with self._work:
            if listener.jobs and listener.jobs[0] is job:
                listener.jobs.popleft()

    def _end_stalled(self, listener: Listener) -> None:
        """On the loop: the client stopped reading; end it so that others get its turns."""
        if listener.closed:
            return
        jobs = list(listener.jobs)
        message = p.control(
            p.ERROR,
            code=p.SLOW_CONSUMER,
            message=f"the client read no audio for {self.limits.stall_timeout:g} s; the "
            "session is closed",
            request_id=jobs[0].request_id if jobs else None,
        )
        for job in jobs:
            job.finished = True  # the one error below ends them all
            job.cancel.cancel("slow consumer")
        self.leave(listener)
        listener.outbox.abandon(message)

    def _on_loop(self, fn: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is gone: the server is shutting down
            pass
