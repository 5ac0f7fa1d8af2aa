"""Who may ask: every HTTP request and WebSocket of voicecli's TCP servers (``serve``,
``web``) passes here before any route sees it.

* **Host.** A server bound to loopback answers only to loopback names (``localhost``,
  ``127.0.0.1`` and the rest of 127/8, ``[::1]``) and the name it was bound to. Any other
  Host is a page whose name was rebound to this machine (DNS rebinding): refused with 403
  before any work. Beyond loopback a server has names nobody can list, so the secret
  decides instead.
* **Origin.** A browser says which page sends the request: it must be this server's own
  page (the same scheme, host and port as the request's Host). Another site's page cannot
  drive it, whatever its Host; a client that is not a browser sends no Origin.
* **The secret.** Beyond loopback every path needs it (``authorized``).
* **Paths.** A server may offer on TCP only some of its routes (``offered``: the engine
  its OpenAI API, never its own routes); the rest are not found there.

A connection on a Unix socket passes: the socket's owner and mode decide who reaches it.
Refusals of OpenAI's routes take OpenAI's error shape, which its clients read.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

OPENAI_PREFIX = "/v1/"  # OpenAI's routes, whose clients read its error shape

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address, brackets allowed) is this machine's alone."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header's name and port; None if it is not one."""
    try:
        parts = urlsplit(f"//{value}")
        return (parts.hostname or "", parts.port) if parts.hostname else None
    except ValueError:
        return None


def _header(scope: Scope, name: bytes) -> str | None:
    values = [v for k, v in scope.get("headers", ()) if k.lower() == name]
    if len(values) != 1:
        return None if not values else "\0"  # two of one header: no answer is safe
    return values[0].decode("latin-1")


@dataclass(frozen=True)
class Refusal:
    why: str  # in one line
    status: int = 403  # 401: the secret is missing or wrong; 404: not offered here


@dataclass(frozen=True)
class Guard:
    """The policy of one server: where it is bound, and what proves a caller may use it
    beyond loopback (``authorized``: None means nothing is needed)."""

    bound_host: str
    authorized: Callable[[Scope], bool] | None = None
    offered: Callable[[str], bool] = field(default=lambda path: True)  # paths on TCP

    @property
    def loopback(self) -> bool:
        return is_loopback(self.bound_host)

    def refusal(self, scope: Scope) -> Refusal | None:
        """Why this request is refused; None if it may go on."""
        server = scope.get("server")
        if server is not None and server[1] is None:
            return None  # a Unix socket: its mode decides
        host_header = _header(scope, b"host")
        host = split_host(host_header) if host_header else None
        if host is None:
            return Refusal("a request needs one Host header")
        name = host[0]
        if self.loopback and not (is_loopback(name) or name == self.bound_host.lower()):
            return Refusal(
                f"this voicecli server is on loopback and answers to localhost, not to "
                f"{name!r}: another site's page may have rebound that name to this machine"
            )
        origin = _header(scope, b"origin")
        if origin is not None and not self._same_origin(origin, host_header or "", scope):
            return Refusal(f"requests from the page at {origin[:100]!r} are not this server's own")
        if not self.offered(scope.get("path", "")):
            return Refusal("not found", status=404)
        if self.authorized is not None and not self.authorized(scope):
            return Refusal(
                "this voicecli server needs its secret (the token or the API key)", status=401
            )
        return None

    @staticmethod
    def _same_origin(origin: str, host: str, scope: Scope) -> bool:
        parts = urlsplit(origin)
        secure = scope.get("scheme") in ("https", "wss")
        scheme = "https" if secure else "http"
        return parts.scheme == scheme and parts.netloc.lower() == host.lower()


class GuardMiddleware:
    """``guard`` before ``app``: a refused request gets 403 (a WebSocket is refused at its
    handshake) and a line in the log; the app never sees it."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refused = self.guard.refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        client = scope.get("client") or ("?", 0)
        log.warning("refused %s %s from %s: %s", scope["type"], path, client[0], refused.why)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": refused.why[:120]})
            return
        if path.startswith(OPENAI_PREFIX):
            from voicecli.server.openai_api.api_error import refusal_body

            kind, body = b"application/json", refusal_body(refused.why, refused.status)
        else:
            kind, body = b"text/plain; charset=utf-8", f"Refused: {refused.why}.\n".encode()
        await send(
            {
                "type": "http.response.start",
                "status": refused.status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def bearer(key: str) -> Callable[[Scope], bool]:
    """A check of ``Authorization: Bearer KEY``, the OpenAI SDK's way of sending a key."""
    import hmac

    expected = f"Bearer {key}"

    def authorized(scope: Scope) -> bool:
        given = _header(scope, b"authorization")
        return given is not None and hmac.compare_digest(given.encode(), expected.encode())

    return authorized


def peer_of(scope: Scope) -> tuple[str, bool]:
    """Where a client connects from (its address, or the local socket's), and whether
    that is beyond this machine."""
    client = scope.get("client")
    if not client or not client[0]:
        return "local", False
    address = str(client[0])
    return address, not is_loopback(address)
