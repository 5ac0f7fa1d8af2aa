"""The SageMaker container app: GET /ping, POST /invocations and the WebSocket
route /invocations-bidirectional-stream, speaking the protocol in ``protocol.py``.

Concurrency model (CPU, one model):
* One worker thread owns the model and synthesizes in turns (``scheduler.Scheduler``):
  each client keeps a share of its own of the queue (``overloaded`` past it), and the
  server speaks for as many listeners as it keeps up with in real time (``busy`` for
  the next one, at once, instead of a stall for everyone).
* Each connection has an outbox holding at most ``Limits.send_queue_frames`` audio
  frames. When a client reads slowly the worker pauses inside the job until there
  is room; after ``Limits.stall_timeout`` it gives up on that job
  (``slow_consumer``) so other sessions get the model back.
* Control replies never wait behind audio, so ``cancel`` is honoured while the
  outbox is full: queued audio of the request is dropped and the worker stops at
  its next chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from voicecli import protocol as p
from voicecli.server.guard import Guard, GuardMiddleware
from voicecli.server.http import invocations_route, ping_route
from voicecli.server.openai_api import AudioAPI
from voicecli.server.rate import MessageRates
from voicecli.server.requests import Limits
from voicecli.server.scheduler import Scheduler
from voicecli.server.ws import WebSocketConnection
from voicecli.tts.steps import SpeechModel


def create_app(
    synth_factory: Callable[[], SpeechModel],
    limits: Limits | None = None,
    *,
    scheduler: Scheduler | None = None,
    routes: Sequence[BaseRoute] = (),
    background: Callable[[], Awaitable[None]] | None = None,
    guard: Guard | None = None,
    audio_api: AudioAPI | None = None,
) -> Starlette:
    """The ASGI app. ``synth_factory`` runs in a thread at startup; /ping says 503 until
    it returns. The resident engine passes its own ``scheduler``, its ``routes`` and a
    ``background`` task that runs while the app does. ``guard``: who may ask, on TCP
    (a Unix socket's mode decides for it). ``audio_api``: OpenAI's audio routes too."""
    scheduler = scheduler or Scheduler(synth_factory, limits or Limits())

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        scheduler.start(asyncio.get_running_loop())
        task = asyncio.create_task(background()) if background is not None else None
        yield
        if task is not None:
            task.cancel()
        scheduler.stop()

    rates = MessageRates(
        scheduler.limits.address_messages_per_second, scheduler.limits.message_burst
    )

    async def websocket(ws: WebSocket) -> None:
        await WebSocketConnection(ws, scheduler, rates).run()

    app = Starlette(
        routes=[
            Route("/ping", ping_route(scheduler), methods=["GET"]),
            Route("/invocations", invocations_route(scheduler), methods=["POST"]),
            WebSocketRoute(p.WS_PATH, websocket),
            *(audio_api.routes(scheduler) if audio_api is not None else ()),
            *routes,
        ],
        lifespan=lifespan,
        middleware=[Middleware(GuardMiddleware, guard=guard)] if guard is not None else [],
    )
    app.state.scheduler = scheduler
    return app
