"""A speaking session: one synthesizer, one audio sink and the keyboard, over many turns.

While a turn plays, single keys control it: Space pauses and resumes, ``s`` skips to
the next sentence, ``q`` quits, and any other key (Esc included) interrupts. Ctrl-C
quits cleanly; a second Ctrl-C while that cleanup runs exits at once.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from types import FrameType

from voicecli import display
from voicecli.cancel import CancelToken
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.keys import KeyListener, NoTerminal
from voicecli.pipeline import SpeechPipeline, TurnOptions, TurnResult
from voicecli.timeline import PLAYED, SENTENCE_READY, TEXT_DONE, Timeline
from voicecli.tts import make_synthesizer

log = logging.getLogger(__name__)

SourceFactory = Callable[[CancelToken, Timeline], Iterable[str]]

PAUSE, SKIP, QUIT = " ", "s", "q"


class Turn:
    """One turn's controls and the progress the live view polls."""

    def __init__(
        self, sink: object, sample_rate: int, cancel: CancelToken, timeline: Timeline, keys: bool
    ) -> None:
        self.sink = sink
        self.sample_rate = sample_rate
        self.cancel = cancel
        self.timeline = timeline
        self.keys = keys
        self.quit = False  # the user asked to leave the program, not just this turn

    @property
    def paused(self) -> bool:
        return bool(getattr(self.sink, "paused", False))

    def key(self, key: str) -> None:
        """The default key map (Session.speak's ``on_key`` replaces it)."""
        if self.cancel.cancelled or not key:
            return
        first = key[0]
        if first == PAUSE:
            self.toggle_pause()
        elif first.lower() == SKIP:
            skip = getattr(self.sink, "skip_sentence", None)
            if skip is not None and not self.paused:
                skip()
        elif first.lower() == QUIT:
            self.quit = True
            self.cancel.cancel("quit")
        else:
            self.cancel.cancel("key")

    def toggle_pause(self) -> None:
        pause, resume = getattr(self.sink, "pause", None), getattr(self.sink, "resume", None)
        if pause is None or resume is None:
            return  # a file sink: nothing plays, so nothing to pause
        (resume if self.paused else pause)()

    def progress(self) -> display.Progress:
        events = self.timeline.events
        sentences = {
            e.sentence: str(e.detail.get("text", ""))
            for e in events
            if e.name == SENTENCE_READY and e.sentence is not None
        }
        played = [e.sentence for e in events if e.name == PLAYED]
        playing, spoken = self._position(played)
        if self.cancel.cancelled:
            state = "interrupted"
        elif self.paused:
            state = "paused"
        elif played:
            state = "speaking"
        else:
            state = "thinking"
        return display.Progress(
            state, sentences, playing, any(e.name == TEXT_DONE for e in events), spoken, self.keys
        )

    def _position(self, played: list[int | None]) -> tuple[int | None, float]:
        """The sentence heard now and the seconds heard, from the player's play position."""
        spans_of = getattr(self.sink, "spans", None)
        heard_position = getattr(self.sink, "heard_position", None)
        if spans_of is None or heard_position is None:  # a file: "played" means written
            return (played[-1] if played else None), 0.0
        spans = spans_of()
        if not spans:
            return None, 0.0
        position = heard_position()
        playing = None
        for span in spans:
            if span.start <= position:
                playing = span.sentence  # between sentences: the last one started
        return playing, max(0, position - spans[0].start) / self.sample_rate


PIPELINE_THREADS = ("voicecli-synth",)  # the source may block on stdin forever: no torch there
CLOSE_TIMEOUT = 15.0  # a forward pass on a slow CPU; a second Ctrl-C cuts it short


def _join_pipeline_threads() -> None:
    """Wait for an interrupted turn's threads to notice the cancel and return.

    An interrupted turn returns at once, leaving the synthesizer to finish its
    forward pass; if the process exited meanwhile, torch's native threads would be
    torn down under it and abort the process ("terminate called ...").
    """
    deadline = time.monotonic() + CLOSE_TIMEOUT
    for thread in threading.enumerate():
        if thread.name in PIPELINE_THREADS and thread is not threading.current_thread():
            thread.join(max(0.0, deadline - time.monotonic()))


class Session:
    def __init__(self, settings: Settings, *, keys: bool = True, warm_up: bool = False) -> None:
        self.settings = settings
        self._want_keys = keys
        self._warm_up = warm_up
        self.keys: KeyListener | None = None
        self.synth = None
        self.sink = None
        self.pipeline: SpeechPipeline | None = None
        self.last_turn: Turn | None = None
        self._saved_sigint: object = None
        self._interrupted_once = False

    def __enter__(self) -> Session:
        from voicecli.audio.player import resolve_device
        from voicecli.audio.sink import make_sink

        if self.settings.play or (self.settings.play is None and self.settings.output is None):
            resolve_device(self.settings.device)  # a bad device fails before the model loads
        self._install_sigint()
        try:
            with display.err.status("Loading the speech model…", spinner="dots"):
                self.synth = make_synthesizer(self.settings)
                if self._warm_up and hasattr(self.synth, "synthesize"):
                    # A process's first forward pass is several hundred ms slower
                    # than later ones; pay that while the user is still typing.
                    for _ in self.synth.synthesize("Hello."):
                        pass
            self.sink = make_sink(self.settings, self.synth.sample_rate)
        except BaseException:
            self.close()
            raise
        self.pipeline = SpeechPipeline(self.synth, self.sink)
        if self._want_keys:
            try:
                self.keys = KeyListener.open()
            except NoTerminal as exc:
                display.note(f"Interrupting with a key is off: {exc}.")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def speak(
        self,
        source: SourceFactory,
        *,
        label: str = "turn",
        newline_is_boundary: bool = False,
        fast_first: bool = False,
        on_text: Callable[[str], None] | None = None,
        on_key: Callable[[str, CancelToken], None] | None = None,
        view: display.TurnView | None = None,
    ) -> TurnResult:
        """Run one turn under the default key map unless ``on_key`` replaces it.

        ``view`` shows the turn; by default a progress line on stderr when it is a
        terminal (what ``say`` wants). Afterwards ``last_turn.quit`` says whether the
        user pressed ``q`` to leave the program.
        """
        if self.pipeline is None or self.synth is None:
            raise VoiceCliError("The session is not open.")
        cancel = CancelToken()
        timeline = Timeline(label)
        options = TurnOptions(
            buffered=self.settings.buffered,
            fast_first=fast_first,
            newline_is_boundary=newline_is_boundary,
            code=self.settings.code,
            max_sentences_ahead=self.settings.max_sentences_ahead,
        )
        turn = Turn(self.sink, self.synth.sample_rate, cancel, timeline, keys=self.keys is not None)
        self.last_turn = turn
        view = view if view is not None else display.turn_view(reply=False)

        def key_pressed(key: str) -> None:
            if on_key is not None:
                on_key(key, cancel)
            else:
                turn.key(key)

        def text(piece: str) -> None:
            view.text(piece)
            if on_text is not None:
                on_text(piece)

        view.start(turn.progress)
        if self.keys is not None:
            self.keys.start(key_pressed)
        result: TurnResult | None = None
        ctrl_c = False
        try:
            result = self.pipeline.run(
                source(cancel, timeline), options, cancel=cancel, timeline=timeline, on_text=text
            )
        except KeyboardInterrupt:
            ctrl_c = True
        finally:
            if self.keys is not None:
                self.keys.stop()
            if turn.paused:
                turn.toggle_pause()  # the next turn must not start silent
            if result is None:  # Ctrl-C or a crash: close the live region all the same
                view.finish("", "", True)
            else:
                view.finish(result.text, result.heard, result.interrupted)
        if ctrl_c:
            raise KeyboardInterrupt
        if self.settings.timings:
            display.show_timings(timeline)
        return result

    # --- Ctrl-C ---------------------------------------------------------------------
    def _install_sigint(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._saved_sigint = signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self._interrupted_once:
            # Cleanup is stuck (a device or server not answering): leave now, but give
            # the terminal back first.
            if self.keys is not None:
                self.keys.restore_terminal()
            if sys.stderr.isatty():
                sys.stderr.write("\x1b[?25h\n")
            os._exit(130)
        self._interrupted_once = True
        raise KeyboardInterrupt

    def close(self) -> None:
        _join_pipeline_threads()
        if self.keys is not None:
            self.keys.close()
            self.keys = None
        if self.sink is not None:
            self.sink.close()
            self.sink = None
        if self.synth is not None:
            self.synth.close()
            self.synth = None
        if self._saved_sigint is not None:
            signal.signal(signal.SIGINT, self._saved_sigint)  # type: ignore[arg-type]
            self._saved_sigint = None
