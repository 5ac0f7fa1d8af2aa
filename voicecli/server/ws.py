"""One WebSocket connection on /invocations-bidirectional-stream.

Every message a client sends gets one typed reply or none that it waits for: a
``speak`` gets its ``sentence_done`` or ``error``, a malformed message an ``error``.
Nothing a client sends can end the connection with a traceback: a message the session
fails to handle is answered with ``server_error`` and logged in one line.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.websockets import WebSocket

from voicecli import protocol as p
from voicecli.server.guard import peer_of
from voicecli.server.outbox import OutAudio, Outbox
from voicecli.server.rate import Bucket, MessageRates, Pace
from voicecli.server.requests import parse_speak
from voicecli.server.scheduler import Job, Scheduler

log = logging.getLogger(__name__)


class WebSocketConnection:
    def __init__(self, ws: WebSocket, scheduler: Scheduler, rates: MessageRates) -> None:
        self.ws = ws
        self.scheduler = scheduler
        self.limits = scheduler.limits
        self.rates = rates
        self.pending: dict[str, Job] = {}
        self.ended = False

    async def run(self) -> None:
        await self.ws.accept()
        self.outbox = Outbox(self.limits, asyncio.get_running_loop())
        peer, remote = peer_of(self.ws.scope)
        self.listener = self.scheduler.listener(self.outbox, peer, remote)
        own = Bucket(self.limits.messages_per_second, self.limits.message_burst)
        pace = Pace(own, self.rates.of(peer), refusal_cost=self.limits.refusal_cost)
        sender = asyncio.create_task(self._send_loop())
        try:
            while not self.outbox.closed:
                await pace.wait()
                message = await self.ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                data = message.get("text")
                if data is None:
                    data = message.get("bytes") or b""
                if self._reply_to(data):
                    pace.refused()
        finally:
            self.scheduler.leave(self.listener)
            self.outbox.close()
            sender.cancel()
            try:
                await sender
            except asyncio.CancelledError:
                pass

    def _reply_to(self, data: str | bytes) -> bool:
        """Handle one message; whether it was refused."""
        try:
            self._handle(p.decode_client_message(data))
        except p.ProtocolError as exc:
            self._error(exc.code, exc.message, exc.request_id)
            return True
        except Exception as exc:  # noqa: BLE001 - a bug must not end the session
            log.warning("could not handle a client message: %r", exc)
            self._error(p.SERVER_ERROR, f"the server could not handle this message ({exc!r})")
        return False

    def _error(self, code: str, message: str, request_id: str | None = None) -> None:
        self.outbox.put_control(
            p.control(p.ERROR, code=code, message=message, request_id=request_id)
        )

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == p.SPEAK:
            self._speak(message)
        elif kind == p.CANCEL:
            request_id = message.get("request_id")
            if request_id is None:
                for job in list(self.pending.values()):
                    job.cancel_now()
            elif not isinstance(request_id, str):
                raise p.ProtocolError(p.BAD_REQUEST, "cancel's request_id must be a string")
            elif request_id in self.pending:
                self.pending[request_id].cancel_now()
            # Cancelling a finished or unknown request is not an error: replies cross.
        elif kind == p.END:
            self.ended = True
            self._maybe_done()
        else:
            raise p.ProtocolError(
                p.UNKNOWN_TYPE,
                f"unknown message type {kind[:40]!r}; a client sends {', '.join(p.CLIENT_TYPES)}",
            )

    def _speak(self, message: dict[str, Any]) -> None:
        request_id, text, voice, speed, words = parse_speak(message, self.limits)
        if self.ended:
            raise p.ProtocolError(p.BAD_REQUEST, "speak after end", request_id)
        if request_id in self.pending:
            # No request_id on this error: it is not the running request's final reply.
            raise p.ProtocolError(
                p.BAD_REQUEST, f"request {request_id!r} is still running; use a new request_id"
            )
        if len(self.pending) >= self.limits.max_pending_per_session:
            raise p.ProtocolError(
                p.OVERLOADED,
                f"this session already has {len(self.pending)} unanswered speak "
                "requests; wait for sentence_done before sending more",
                request_id,
            )
        job = Job(request_id, text, voice, speed, self.outbox, self._finished, words=words)
        self.scheduler.submit(self.listener, job)
        self.pending[request_id] = job

    def _finished(self, job: Job) -> None:
        self.pending.pop(job.request_id, None)
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.ended and not self.pending and not self.outbox.closed:
            self.outbox.put_control(p.control(p.DONE))
            self.outbox.finish()

    async def _send_loop(self) -> None:
        try:
            while (item := await self.outbox.get()) is not None:
                if isinstance(item, OutAudio):
                    await self.ws.send_bytes(item.frame)
                else:
                    await self.ws.send_text(p.encode_json(item))
            if self.outbox.close_code != 1000:
                log.warning("closing a session that does not read its replies")
            await self.ws.close(self.outbox.close_code)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the client went away; the receive loop ends too
            log.debug("send failed; closing the session", exc_info=True)
        finally:
            self.outbox.close()
