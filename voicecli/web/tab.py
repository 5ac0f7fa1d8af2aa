"""One browser tab: a ``Session`` over the process's shared synthesizer with the tab as
its sink, and a ``Conversation`` of its own. Turns run one at a time on the tab's
thread; a question asked while a reply plays interrupts it, as a key does."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from voicecli import display
from voicecli import protocol as p
from voicecli.chat import Conversation
from voicecli.config import Settings
from voicecli.errors import VoiceCliError
from voicecli.frames import Synthesizer
from voicecli.llm.contract import LLM
from voicecli.session import Session
from voicecli.web import messages as m
from voicecli.web.page_sink import BrowserSink, PageLink, PageStalled

log = logging.getLogger(__name__)


NOW_EVERY = 0.04  # seconds between reports of the word being heard


class PageView(display.TurnView):
    """The turn as the page shows it: the reply as it streams, each unit handed to
    speech, and the sentence and word being heard (from what the page reports)."""

    def __init__(self, link: PageLink, turn: int) -> None:
        self.link = link
        self.turn = turn
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    def start(self, progress: Callable[[], display.Progress]) -> None:
        self._poller = threading.Thread(
            target=self._poll, args=(progress,), name="voicecli-web-now", daemon=True
        )
        self._poller.start()

    def text(self, piece: str) -> None:
        self.link.send_text(m.message(m.TEXT, turn=self.turn, piece=piece))

    def finish(self, text: str, heard: str, interrupted: bool) -> None:
        self._stop.set()
        if self._poller is not None:
            self._poller.join()

    def _poll(self, progress: Callable[[], display.Progress]) -> None:
        sent: set[int] = set()
        last: tuple | None = None
        while True:
            stopping = self._stop.is_set()
            now = progress()
            for index in sorted(now.sentences):
                if index not in sent:
                    sent.add(index)
                    self.link.send_text(
                        m.message(
                            m.SENTENCE, turn=self.turn, sentence=index, display=now.sentences[index]
                        )
                    )
            state = (now.playing, now.word, now.state)
            if state != last:
                last = state
                word = list(now.word) if now.word is not None else None
                self.link.send_text(
                    m.message(
                        m.NOW, turn=self.turn, sentence=now.playing, word=word, state=now.state
                    )
                )
            if stopping or self.link.closed:
                return
            self._stop.wait(NOW_EVERY)


class Tab:
    def __init__(
        self,
        settings: Settings,
        synth: Synthesizer,
        llm: LLM,
        link: PageLink,
        *,
        stall_timeout: float,
    ) -> None:
        self.link = link
        self.sink = BrowserSink(
            link,
            synth.sample_rate,
            ahead_seconds=settings.max_audio_ahead,
            stall_timeout=stall_timeout,
        )
        # Opened and closed on the tab's thread: a session opened on the main thread would
        # take Ctrl-C from the web server.
        self.session = Session(settings, keys=False, synth=synth, sink=self.sink)
        self._chat = Conversation(settings, self.session, llm)
        self._asks: queue.Queue[m.Ask | None] = queue.Queue(maxsize=1)
        self._turns = 0
        self._worker = threading.Thread(target=self._run, name="voicecli-web-tab", daemon=True)
        self._worker.start()

    def handle(self, message: m.PageMessage) -> None:
        """A message from the page (on the event loop: never blocks)."""
        match message:
            case m.Ask():
                # Stop the reply playing first: the new question must not be the one stopped.
                self.session.interrupt("new question")
                self._replace_pending(message)
            case m.Interrupt():
                self.session.interrupt("page")
            case m.Played():
                self.sink.played(message)
            case m.Audible():
                self.sink.audible(message)

    def _replace_pending(self, item: m.Ask | None) -> None:
        """The newest question waits; one asked before it and not begun is dropped."""
        while True:
            try:
                self._asks.put_nowait(item)
                return
            except queue.Full:
                try:
                    self._asks.get_nowait()
                except queue.Empty:
                    pass

    def close(self) -> None:
        """The tab is gone: stop its turn, and its thread (from the event loop)."""
        self._replace_pending(None)
        self.session.interrupt("tab closed")

    def _run(self) -> None:
        try:
            with self.session:
                self._serve()
        except VoiceCliError as exc:  # the session could not open: nothing for this tab
            self.link.end(p.SERVER_ERROR, str(exc))

    def _serve(self) -> None:
        while True:
            ask = self._asks.get()
            if ask is None:
                return
            try:
                self._turn(ask)
            except Exception:  # noqa: BLE001 - the tab lives on; the log has the trace
                log.exception("web turn failed")
                self.link.send_text(
                    m.message(
                        m.ERROR, code=p.SERVER_ERROR, message="The turn failed (see the log)."
                    )
                )

    def _turn(self, ask: m.Ask) -> None:
        self._turns += 1
        turn = self._turns
        self.sink.expect_turn(turn)
        self.link.send_text(m.message(m.TURN, turn=turn, question=ask.text, buffered=ask.buffered))
        result = self._chat.ask(ask.text, view=PageView(self.link, turn), buffered=ask.buffered)
        if isinstance(result.error, PageStalled):
            self.link.end(p.SLOW_CONSUMER, str(result.error))  # as the server ends its own
            return
        self.link.send_text(
            m.message(
                m.TURN_END,
                turn=turn,
                interrupted=result.interrupted,
                heard=result.heard,
                error=None if result.error is None else str(result.error),
            )
        )
