"""A speaking session: one synthesizer, one audio sink and the keyboard, over many turns."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from voicecli import display
from voicecli.cancel import CancelToken
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.keys import KeyListener, NoTerminal
from voicecli.pipeline import SpeechPipeline, TurnOptions, TurnResult
from voicecli.timeline import Timeline
from voicecli.tts import make_synthesizer

log = logging.getLogger(__name__)

SourceFactory = Callable[[CancelToken, Timeline], Iterable[str]]


class Session:
    def __init__(self, settings: Settings, *, keys: bool = True) -> None:
        self.settings = settings
        self._want_keys = keys
        self.keys: KeyListener | None = None
        self.synth = None
        self.sink = None
        self.pipeline: SpeechPipeline | None = None

    def __enter__(self) -> Session:
        from voicecli.audio.sink import make_sink

        try:
            with display.err.status("Loading the speech model…", spinner="dots"):
                self.synth = make_synthesizer(self.settings)
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

    def speak(self, source: SourceFactory, *, label: str = "turn",
              newline_is_boundary: bool = False, fast_first: bool = False,
              on_text: Callable[[str], None] | None = None,
              on_key: Callable[[str, CancelToken], None] | None = None) -> TurnResult:
        """Run one turn; any key press interrupts it unless ``on_key`` decides otherwise."""
        if self.pipeline is None:
            raise VoiceCliError("The session is not open.")
        cancel = CancelToken()
        timeline = Timeline(label)
        options = TurnOptions(buffered=self.settings.buffered, fast_first=fast_first,
                              newline_is_boundary=newline_is_boundary, code=self.settings.code,
                              max_sentences_ahead=self.settings.max_sentences_ahead)

        def key_pressed(key: str) -> None:
            if on_key is not None:
                on_key(key, cancel)
            else:
                cancel.cancel("key")

        if self.keys is not None:
            self.keys.start(key_pressed)
        try:
            result = self.pipeline.run(source(cancel, timeline), options, cancel=cancel,
                                       timeline=timeline, on_text=on_text)
        finally:
            if self.keys is not None:
                self.keys.stop()
        if self.settings.timings:
            display.show_timings(timeline)
        return result

    def close(self) -> None:
        if self.keys is not None:
            self.keys.close()
            self.keys = None
        if self.sink is not None:
            self.sink.close()
            self.sink = None
        if self.synth is not None:
            self.synth.close()
            self.synth = None
