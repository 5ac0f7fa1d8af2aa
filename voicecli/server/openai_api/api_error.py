"""Errors as OpenAI's API gives them: ``{"error": {"message", "type", "param", "code"}}``
with the status its clients act on (the SDK raises ``BadRequestError`` for 400,
``AuthenticationError`` for 401, ``RateLimitError`` for 429 and so on, and retries 429
and 5xx after ``Retry-After``)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from starlette.responses import JSONResponse

from voicecli import protocol as p

INVALID_REQUEST = "invalid_request_error"
AUTHENTICATION = "authentication_error"
NOT_FOUND = "not_found_error"
RATE_LIMIT = "rate_limit_error"
SERVER = "server_error"

# The scheduler's refusals and failures, as OpenAI's: (status, type).
_FROM_PROTOCOL = {
    p.BUSY: (503, SERVER),
    p.OVERLOADED: (429, RATE_LIMIT),
    p.TEXT_TOO_LONG: (400, INVALID_REQUEST),
    p.BAD_REQUEST: (400, INVALID_REQUEST),
    p.SYNTHESIS_FAILED: (500, SERVER),
    p.SLOW_CONSUMER: (408, INVALID_REQUEST),
}


@dataclass
class APIError(Exception):
    status: int
    message: str
    type: str = INVALID_REQUEST
    param: str | None = None
    code: str | None = None

    def body(self) -> dict[str, object]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        retry = {"Retry-After": "1"} if self.status in (429, 503) else None
        return JSONResponse(self.body(), status_code=self.status, headers=retry)

    @classmethod
    def of(cls, exc: p.ProtocolError, param: str | None = None) -> APIError:
        """A refusal or failure of the scheduler (or of a speak's checks)."""
        status, kind = _FROM_PROTOCOL.get(exc.code, (400, INVALID_REQUEST))
        return cls(status, _sentence(exc.message), kind, param, exc.code)


def invalid(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, INVALID_REQUEST, param, code)


def refusal_body(why: str, status: int) -> bytes:
    """The guard's refusal of a request to the API: a wrong Host or Origin (403), a
    route not offered here (404), or no key, or a wrong one (401)."""
    match status:
        case 401:
            error = APIError(401, _sentence(why), AUTHENTICATION, None, "invalid_api_key")
        case 404:
            error = APIError(404, "Not found.", NOT_FOUND, None, "not_found")
        case _:
            error = APIError(status, _sentence(why), INVALID_REQUEST, None, "forbidden")
    return json.dumps(error.body()).encode()


def _sentence(text: str) -> str:
    text = text.strip()
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", "?", "!")) else ".")
