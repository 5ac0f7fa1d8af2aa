"""``voicecli web``: the page, its scripts, and one WebSocket per tab (``/ws``).

The LLM and the synthesizer are opened once, before the first tab, and serve every
tab: with the resident engine (the default) both live there and the engine's scheduler
takes the tabs' sentences in turn; without it, Kokoro is in this process and the tabs'
forward passes take turns on its one torch thread.

Every request passes ``server.guard`` first: bound to loopback, the page answers only to
loopback names (a page whose name was rebound to this machine is refused) and only to its
own page's Origin; bound anywhere else, every request needs the token, in the URL or in
the cookie the page gets with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
from contextlib import ExitStack
from importlib import resources
from urllib.parse import parse_qs

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from voicecli import display
from voicecli import protocol as p
from voicecli.chat import prepare_llm
from voicecli.config import Settings
from voicecli.frames import Synthesizer
from voicecli.llm.contract import LLM
from voicecli.llm.open import open_llm
from voicecli.server.guard import Guard, GuardMiddleware, Scope, is_loopback
from voicecli.server.rate import Bucket, Pace
from voicecli.server.requests import Limits
from voicecli.server.run import bind, uvicorn_config
from voicecli.speech import make_synthesizer
from voicecli.web import messages as m
from voicecli.web.tab import Tab

log = logging.getLogger(__name__)

STALL_TIMEOUT = 30.0  # seconds a tab may play nothing with audio waiting (the server's)
# Bytes queued for a tab and not yet taken by its socket: far above what backpressure
# lets through (10 s of audio is 480 kB), so only a tab that stopped reading meets it.
MAX_BACKLOG_BYTES = 4 << 20
# A tab's messages are read at a `voicecli serve` connection's rate, a refused one
# counting as several (``server.rate``): the page reports what it played a few dozen
# times a second, and a tab that floods (each question starts an LLM request) is read
# later, while the other tabs are read as before.
TAB_LIMITS = Limits()
TOKEN_COOKIE = "voicecli_token"
POLICY_VIOLATION = 1008  # WebSocket close code
_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/page.js": ("page.js", "text/javascript; charset=utf-8"),
    "/worklet.js": ("worklet.js", "text/javascript; charset=utf-8"),
    "/page.css": ("page.css", "text/css; charset=utf-8"),
}


class TabSocket:
    """A tab's WebSocket for threads: sends queue up, in order, and one task sends
    them. A tab that stops reading backs up here; past ``MAX_BACKLOG_BYTES`` it is
    closed (``slow_consumer``)."""

    def __init__(self, ws: WebSocket, loop: asyncio.AbstractEventLoop) -> None:
        self.ws = ws
        self.loop = loop
        self._queue: asyncio.Queue[str | bytes | None] = asyncio.Queue()
        self._backlog = 0
        self._overflowed = False
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def send_text(self, text: str) -> None:
        self._put(text)

    def send_bytes(self, data: bytes) -> None:
        self._put(data)

    def _put(self, item: str | bytes) -> None:
        if not self._closed:
            with contextlib.suppress(RuntimeError):  # the loop is gone: so is the tab
                self.loop.call_soon_threadsafe(self._enqueue, item)

    def _enqueue(self, item: str | bytes | None) -> None:
        if self._closed:
            return
        if item is not None:
            self._backlog += len(item)
            if self._backlog > MAX_BACKLOG_BYTES:
                log.warning("a tab stopped reading: closing it")
                self._overflowed = True
                self._queue.put_nowait(
                    m.message(m.ERROR, code=p.SLOW_CONSUMER, message="The page stopped reading.")
                )
                self.close()
                return
        self._queue.put_nowait(item)

    def close(self) -> None:
        """From the event loop: nothing more is queued, and the sender stops."""
        if not self._closed:
            self._closed = True
            self._queue.put_nowait(None)

    def end(self, code: str, message: str) -> None:
        """From any thread: say why, then close."""
        self._put(m.message(m.ERROR, code=code, message=message))
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self.close)

    async def run(self) -> None:
        try:
            while (item := await self._queue.get()) is not None:
                self._backlog -= len(item)
                if isinstance(item, str):
                    await self.ws.send_text(item)
                else:
                    await self.ws.send_bytes(item)
        except (WebSocketDisconnect, OSError, RuntimeError):
            self._closed = True  # the tab is gone: what is queued has nobody to go to
            return
        with contextlib.suppress(Exception):
            await self.ws.close(POLICY_VIOLATION if self._overflowed else 1000)


class WebApp:
    """The shared LLM and synthesizer, and the routes every tab uses."""

    def __init__(
        self,
        settings: Settings,
        synth: Synthesizer,
        llm: LLM,
        token: str | None = None,
        *,
        host: str = "127.0.0.1",
        stall_timeout: float = STALL_TIMEOUT,
    ) -> None:
        self.settings = settings
        self.synth = synth
        self.llm = llm  # every tab's: replies stream side by side
        self.token = token
        self.host = host  # where it is bound: which Host names it answers to
        self.stall_timeout = stall_timeout
        self.tabs: set[Tab] = set()

    def authorized(self, scope: Scope) -> bool:
        """The token, in the URL (``?token=``) or in the cookie the page was given."""
        if self.token is None:
            return True
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        cookies = _cookies(scope)
        given = [*query.get("token", []), cookies.get(TOKEN_COOKIE)]
        token = self.token.encode("utf-8", "surrogatepass")
        return any(
            g is not None and hmac.compare_digest(g.encode("utf-8", "surrogatepass"), token)
            for g in given
        )

    async def page(self, request: Request) -> Response:
        name, media_type = _FILES[request.url.path]
        body = resources.files("voicecli.web").joinpath("static", name).read_bytes()
        response = Response(body, media_type=media_type, headers={"Cache-Control": "no-store"})
        if self.token is not None and name == "index.html":
            # The page's own requests (its scripts, its worklet) carry it from now on.
            response.set_cookie(TOKEN_COOKIE, self.token, httponly=True, samesite="strict")
        return response

    async def socket(self, ws: WebSocket) -> None:
        await ws.accept()
        link = TabSocket(ws, asyncio.get_running_loop())
        sender = asyncio.create_task(link.run())
        link.send_text(
            m.message(
                m.HELLO,
                sample_rate=self.synth.sample_rate,
                synthesizer=self.synth.describe().get("kind"),
            )
        )
        tab = Tab(self.settings, self.synth, self.llm, link, stall_timeout=self.stall_timeout)
        self.tabs.add(tab)
        pace = Pace(
            Bucket(TAB_LIMITS.messages_per_second, TAB_LIMITS.message_burst),
            refusal_cost=TAB_LIMITS.refusal_cost,
        )
        try:
            while not link.closed:
                await pace.wait()
                data = await ws.receive()
                if data["type"] == "websocket.disconnect":
                    break
                raw = data.get("text")
                if raw is None:
                    raw = data.get("bytes") or b""
                try:
                    tab.handle(m.parse_page_message(raw))
                except p.ProtocolError as exc:
                    link.send_text(m.message(m.ERROR, code=exc.code, message=exc.message))
                    pace.refused()
        except WebSocketDisconnect:
            pass
        finally:
            self.tabs.discard(tab)
            tab.close()
            if not link.closed:
                link.close()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender

    def routes(self) -> Starlette:
        guard = Guard(self.host, authorized=None if self.token is None else self.authorized)
        return Starlette(
            routes=[
                *(Route(path, self.page) for path in _FILES),
                Route("/favicon.ico", lambda request: Response(status_code=204)),
                WebSocketRoute("/ws", self.socket),
            ],
            middleware=[Middleware(GuardMiddleware, guard=guard)],
        )


def _cookies(scope: Scope) -> dict[str, str]:
    from http.cookies import SimpleCookie

    jar: SimpleCookie = SimpleCookie()
    for key, value in scope.get("headers", ()):
        if key.lower() == b"cookie":
            try:
                jar.load(value.decode("latin-1"))
            except Exception:  # noqa: BLE001 - a malformed cookie is no token
                return {}
    return {name: morsel.value for name, morsel in jar.items()}


def run_web(settings: Settings, host: str, port: int, token: str | None) -> None:
    """Serve the page until interrupted."""
    if token is None and not is_loopback(host):
        token = secrets.token_urlsafe(18)
    sock = bind(host, port)
    with ExitStack() as stack:
        llm = open_llm(settings)
        stack.callback(llm.close)
        with display.err.status("Loading the speech model…", spinner="dots"):
            # A tab is told at once that the engine is busy, as serve's clients are.
            synth = make_synthesizer(settings, notify=display.note, wait_for_place=False)
            stack.callback(synth.close)
            synth.warm_up()
        prepare_llm(llm)  # the embedded model loaded, or the server checked, before a tab
        app = WebApp(settings, synth, llm, token, host=host)
        shown = sock.getsockname()
        url = f"http://{'localhost' if is_loopback(host) else host}:{shown[1]}/"
        if token is not None:
            url += f"?token={token}"
            display.note(
                f"Listening on {host}, beyond this machine: every request needs the token."
            )
        display.out.print(f"voicecli web: open {url}", markup=False, highlight=False)
        web_server(app, verbose=settings.verbose).run(sockets=[sock])


def web_server(app: WebApp, *, verbose: bool = False) -> uvicorn.Server:
    """uvicorn serving ``app`` with the speech server's protections: a deadline for each
    request's head, a fixed send buffer, oversized frames refused."""
    config = uvicorn_config(
        app.routes(),
        "debug" if verbose else "warning",
        ws_max_size=m.MAX_MESSAGE_BYTES,  # larger frames: closed with 1009
        ws_ping_interval=30.0,
        ws_ping_timeout=60.0,
        timeout_graceful_shutdown=2,
    )
    return uvicorn.Server(config)
