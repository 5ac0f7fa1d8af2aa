"""A speaking session: one synthesizer, one audio sink and the keyboard, over many turns.

While a turn plays, single keys control it: Space pauses and resumes, ``s`` skips to
the next sentence, ``q`` quits, and any other key (Esc included) interrupts. Ctrl-C
quits cleanly; a second Ctrl-C while that cleanup runs exits at once.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType

from voicecli import display
from voicecli.audio.devices import resolve_device
from voicecli.audio.sinks import make_sink
from voicecli.audio.wav import check_writable
from voicecli.cancel import CancelToken
from voicecli.captions import Captions
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.frames import AudioSink, Sentence, Synthesizer
from voicecli.heard import now_playing
from voicecli.keys import KeyListener, NoTerminal
from voicecli.pipeline import SpeechPipeline, TurnOptions, TurnResult
from voicecli.speech import make_synthesizer
from voicecli.timeline import PLAYED, SENTENCE_READY, TEXT_DONE, Timeline

log = logging.getLogger(__name__)

SourceFactory = Callable[[CancelToken, Timeline], Iterable[str]]

PAUSE, SKIP, QUIT = " ", "s", "q"


class Turn:
    """One turn's controls and the progress the live view polls."""

    def __init__(
        self, sink: AudioSink, cancel: CancelToken, timeline: Timeline, keys: bool
    ) -> None:
        self.sink = sink
        self.cancel = cancel
        self.timeline = timeline
        self.keys = keys
        self.quit = False  # the user asked to leave the program, not just this turn
        self._held = False  # paused by ``hold``, not by the listener
        # Begun early (``Pending``) and not yet confirmed: silent, whatever else asks.
        self.unconfirmed = False

    def key(self, key: str) -> None:
        """The default key map (Session.speak's ``on_key`` replaces it)."""
        if self.cancel.cancelled or not key:
            return
        first = key[0]
        if first == PAUSE:
            self.toggle_pause()
        elif first.lower() == SKIP:
            if self.sink.capabilities.skip and not self.sink.paused:
                self.sink.skip_sentence()
        elif first.lower() == QUIT:
            self.quit = True
            self.cancel.cancel("quit")
        else:
            self.cancel.cancel("key")

    def toggle_pause(self) -> None:
        if not self.sink.capabilities.pause or self.unconfirmed:
            return  # a file: nothing plays, so nothing to pause
        self._held = False  # the listener's choice from now on
        if self.sink.paused:
            self.sink.resume()
        else:
            self.sink.pause()

    def hold(self) -> None:
        """The user may be starting to speak: pause until ``release`` or the cut."""
        if self.sink.capabilities.pause and not self.sink.paused and not self.cancel.cancelled:
            self.sink.pause()
            self._held = True

    def release(self) -> None:
        """Go on after ``hold`` (a pause the listener made stays)."""
        if self._held and not self.unconfirmed:
            self._held = False
            if self.sink.paused:
                self.sink.resume()

    def progress(self) -> display.Progress:
        events = self.timeline.events
        sentences = [
            Sentence(e.sentence, str(e.detail.get("spoken", "")), str(e.detail.get("text", "")))
            for e in events
            if e.name == SENTENCE_READY and e.sentence is not None
        ]
        now = now_playing(self.sink.playback(), sentences)
        if self.cancel.cancelled:
            state = "interrupted"
        elif self.sink.paused:
            state = "paused"
        elif any(e.name == PLAYED for e in events):
            state = "speaking"
        else:
            state = "thinking"
        return display.Progress(
            state,
            {s.index: s.display for s in sentences},
            now.sentence,
            any(e.name == TEXT_DONE for e in events),
            now.seconds,
            self.keys,
            now.word,
        )


class Pending:
    """A turn begun before it is certain to be wanted (a reply prepared while the user
    may still be speaking): silent and unseen until ``confirm``, which lets it play and
    shows it; ``withdraw`` cancels it, before it starts or while it runs. Either may be
    called from any thread, before ``Session.speak`` has begun the turn."""

    def __init__(self) -> None:
        self.cancel = CancelToken()
        self._lock = threading.Lock()
        self._confirmed = False
        self._turn: Turn | None = None
        self._view: display.DeferredView | None = None

    @property
    def confirmed(self) -> bool:
        return self._confirmed

    def attach(self, turn: Turn, view: display.DeferredView) -> None:
        """The turn has begun (``Session.speak``)."""
        with self._lock:
            self._turn, self._view = turn, view
            if not self._confirmed:
                turn.hold()
                turn.unconfirmed = True

    def confirm(self) -> None:
        with self._lock:
            self._confirmed = True
            turn, view = self._turn, self._view
        if view is not None:
            view.show()
        if turn is not None:
            turn.unconfirmed = False
            turn.release()

    def withdraw(self) -> None:
        if not self._confirmed:
            self.cancel.cancel("withdrawn")


def _append_json(path: Path, record: dict) -> None:
    try:
        with path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
    except OSError as exc:
        raise VoiceCliError(f"Cannot write the timeline file {path}: {exc.strerror}.") from None


class Session:
    """``synth`` and ``sink``, when given, are someone else's (a synthesizer shared by
    many sessions, a browser tab's sink): used, not opened or closed here."""

    def __init__(
        self,
        settings: Settings,
        *,
        keys: bool = True,
        warm_up: bool = False,
        synth: Synthesizer | None = None,
        sink: AudioSink | None = None,
    ) -> None:
        self.settings = settings
        self._want_keys = keys
        self._warm_up = warm_up
        self.keys: KeyListener | None = None
        self.synth: Synthesizer | None = synth
        self.sink: AudioSink | None = sink
        self._owns_synth = synth is None
        self._owns_sink = sink is None
        self.pipeline: SpeechPipeline | None = None
        self.last_turn: Turn | None = None
        self.captions: Captions | None = None
        self._saved_sigint: object = None
        self._interrupted_once = False
        self._turn: Turn | None = None  # the turn being spoken, for ``interrupt``

    def __enter__(self) -> Session:
        # A bad device or output path fails before the model loads, not after.
        if self.settings.captions is not None:
            if self.settings.output is None:
                raise VoiceCliError(
                    "--captions needs --output FILE.wav: captions are timed to the audio "
                    "in that file."
                )
            if self.settings.captions.resolve() == self.settings.output.resolve():
                raise VoiceCliError("--captions and --output name the same file.")
            self.captions = Captions(self.settings.captions)
            check_writable(self.settings.captions)
        if self._owns_sink:
            if self.settings.plays:
                resolve_device(self.settings.device)
            if self.settings.output is not None:
                check_writable(self.settings.output)
        self._install_sigint()
        try:
            if self.synth is None:
                with display.err.status("Loading the speech model…", spinner="dots"):
                    self.synth = make_synthesizer(self.settings, notify=display.note)
                    if self._warm_up:  # while the user is still typing
                        self.synth.warm_up()
            if self.sink is None:
                self.sink = make_sink(self.settings, self.synth.sample_rate)
            if self.captions is not None and not self.synth.capabilities.word_timings:
                display.note(
                    "Captions are timed by estimate: this synthesizer gives no word timings "
                    "(Kokoro gives them for English)."
                )
        except BaseException:
            self.close()
            raise
        self.pipeline = SpeechPipeline(self.synth, self.sink)
        if self._want_keys:
            try:
                self.keys = KeyListener.open()
            except NoTerminal as exc:
                if self.settings.plays:  # writing a file only, there is nothing to hear
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
        pending: Pending | None = None,
        buffered: bool | None = None,
    ) -> TurnResult:
        """Run one turn under the default key map unless ``on_key`` replaces it.

        ``view`` shows the turn; by default a progress line on stderr when it is a
        terminal (what ``say`` wants). Afterwards ``last_turn.quit`` says whether the
        user pressed ``q`` to leave the program. ``pending``: the turn is silent and
        unseen until it is confirmed, or withdrawn. ``buffered`` overrides the
        settings' delivery for this turn (a bench alternates the two).
        """
        if self.pipeline is None or self.synth is None:
            raise VoiceCliError("The session is not open.")
        cancel = pending.cancel if pending is not None else CancelToken()
        timeline = Timeline(label)
        options = TurnOptions(
            buffered=self.settings.buffered if buffered is None else buffered,
            fast_first=fast_first,
            newline_is_boundary=newline_is_boundary,
            code=self.settings.code,
            max_sentences_ahead=self.settings.max_sentences_ahead,
        )
        turn = Turn(self.sink, cancel, timeline, keys=self.keys is not None)
        self.last_turn = self._turn = turn
        view = view if view is not None else display.turn_view(reply=False)
        if pending is not None:
            view = display.DeferredView(view)
            pending.attach(turn, view)

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
            self._turn = None
            if self.keys is not None:
                self.keys.stop()
            if self.sink.paused:
                self.sink.resume()  # the next turn must not start silent
            if result is None:  # Ctrl-C or a crash: close the live region all the same
                view.finish("", "", True)
            else:
                view.finish(result.text, result.heard, result.interrupted)
        if self.captions is not None and result is not None:
            recording = self.sink.recording()
            if recording is not None:
                self.captions.add_turn(recording, result.sentences)
        if ctrl_c:
            raise KeyboardInterrupt
        if self.settings.timings and (pending is None or pending.confirmed):
            display.show_timings(timeline)
        if self.settings.timeline_file is not None:
            _append_json(self.settings.timeline_file, timeline.to_dict())
        return result

    def interrupt(self, reason: str) -> None:
        """Flush the turn being spoken, as a key does (from any thread); no turn, no-op."""
        turn = self._turn
        if turn is not None:
            turn.cancel.cancel(reason)

    def hold(self) -> None:
        """Pause the turn being spoken until ``release`` or ``interrupt`` (any thread)."""
        turn = self._turn
        if turn is not None:
            turn.hold()

    def release(self) -> None:
        turn = self._turn
        if turn is not None:
            turn.release()

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
        if self.pipeline is not None:
            self.pipeline.close()
        if self.keys is not None:
            self.keys.close()
            self.keys = None
        if self.sink is not None and self._owns_sink:
            self.sink.close()
        self.sink = None
        if self.synth is not None and self._owns_synth:
            self.synth.close()
        self.synth = None
        if self._saved_sigint is not None:
            signal.signal(signal.SIGINT, self._saved_sigint)  # type: ignore[arg-type]
            self._saved_sigint = None
