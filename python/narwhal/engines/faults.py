"""Engine leg failures, with the router's kinds, statuses and messages (SPEC §8).

Internal API: it may change between releases.
"""

from __future__ import annotations

import json
from typing import Optional


class FaultKind:
    """Stable fault kind names (the router's metric tags and error envelope codes)."""

    UNREACHABLE = "unreachable"              # 502: refused, reset, closed before a response
    TIMEOUT = "timeout"                      # 504: prefill timeout or connect timeout
    FIRST_TOKEN_TIMEOUT = "first_token_timeout"  # 504: no generated token in time
    SILENCE = "silence"                      # 504: nothing between tokens in time
    CLOSED_EARLY = "closed_early"            # 502: stream closed before [DONE]
    DONE_BEFORE_TOKEN = "done_before_token"  # 502: [DONE] before any generated token
    STREAM_ERROR = "stream_error"            # the error's own code: error object in a 200 stream
    ENGINE_STATUS = "engine_status"          # 502: the engine answered 5xx (other than 503)
    BACKPRESSURE = "backpressure"            # 503: the engine answered 429 or 503
    REJECTED = "rejected"                    # passed through: the engine answered 4xx
    BAD_RESPONSE = "bad_response"            # 502: a response that cannot be read
    RESPONSE_TOO_LARGE = "response_too_large"  # 502: an answer past server.max_response_bytes
    INVALID_DESCRIPTOR = "invalid_descriptor"  # 502: the handoff descriptor failed validation
    STALE_HANDOFF = "stale_handoff"          # 502: the handoff outlived its maximum age
    MISSING_DESCRIPTOR = "missing_descriptor"  # 502: no descriptor where one was required
    DEADLINE_EXCEEDED = "deadline_exceeded"  # 504: the request deadline passed
    CLIENT_DISCONNECTED = "client_disconnected"  # the caller went away
    ABORTED = "aborted"                      # 503: the caller aborted the leg
    ROUTER_OVERLOADED = "router_overloaded"  # 503: out of file descriptors or connections
    HELD_OVERFLOW = "held_overflow"          # 502: too many events or bytes before the first token


_TIMEOUT_SHAPED = {FaultKind.TIMEOUT, FaultKind.FIRST_TOKEN_TIMEOUT, FaultKind.SILENCE,
                   FaultKind.DEADLINE_EXCEEDED}
# response_too_large is the router operator's bound (server.max_response_bytes), not the
# engine's failure: another engine would answer just as much.
_NOT_RETRIABLE = {FaultKind.REJECTED, FaultKind.DEADLINE_EXCEEDED, FaultKind.CLIENT_DISCONNECTED,
                  FaultKind.ABORTED, FaultKind.ROUTER_OVERLOADED, FaultKind.RESPONSE_TOO_LARGE}
_NOT_ENGINES = {FaultKind.REJECTED, FaultKind.BACKPRESSURE, FaultKind.DEADLINE_EXCEEDED,
                FaultKind.CLIENT_DISCONNECTED, FaultKind.ABORTED, FaultKind.ROUTER_OVERLOADED,
                FaultKind.RESPONSE_TOO_LARGE}

PREFILL, DECODE = "prefill", "decode"


def client_status(kind: str, engine_status: int = 0) -> int:
    """The HTTP status a router client gets for a fault of kind before commit."""
    if kind in _TIMEOUT_SHAPED:
        return 504
    if kind in (FaultKind.STREAM_ERROR, FaultKind.REJECTED):
        return engine_status
    if kind in (FaultKind.BACKPRESSURE, FaultKind.CLIENT_DISCONNECTED, FaultKind.ABORTED,
                FaultKind.ROUTER_OVERLOADED):
        return 503
    return 502


def error_type(status: int) -> str:
    """The envelope's type for a status the router itself produces."""
    return {400: "invalid_request_error", 404: "invalid_request_error", 413: "invalid_request_error",
            401: "authentication_error", 502: "bad_gateway", 503: "service_unavailable",
            504: "gateway_timeout"}.get(status, "server_error")


class EngineFault(Exception):
    """An engine leg failed.

    ``kind`` is one of :class:`FaultKind`; ``status`` the HTTP status the router would answer
    with (504 for timeout-shaped faults, 502 for other engine faults, an in-stream error's own
    code, a 4xx passed through); ``message`` what happened, in words a client may see.
    ``engine_status`` and ``body`` are what the engine sent, when it sent anything.
    """

    def __init__(self, kind: str, leg: str, engine: str, message: str, *, engine_status: int = 0,
                 body: bytes = b"", reason: str = "", retry_after: str = "", cause: Optional[BaseException] = None,
                 event: Optional[object] = None):
        super().__init__(f"{leg} leg on {engine}: {kind}: {message}")
        self.kind = kind
        self.leg = leg
        self.engine = engine
        self.message = message
        self.engine_status = engine_status
        self.body = body
        self.reason = reason  # descriptor rejection reason (invalid_descriptor only)
        self.retry_after = retry_after
        self.cause = cause
        self.event = event  # the error event of a stream_error raised mid-stream

    @property
    def status(self) -> int:
        return client_status(self.kind, self.engine_status)

    @property
    def retriable(self) -> bool:
        """Whether a fresh attempt (before visible output) may cure it."""
        if self.kind == FaultKind.STREAM_ERROR:
            return self.engine_status >= 500
        return self.kind not in _NOT_RETRIABLE

    @property
    def counts_against_engine(self) -> bool:
        if self.kind == FaultKind.STREAM_ERROR:
            return self.engine_status >= 500
        return self.kind not in _NOT_ENGINES

    def envelope(self) -> bytes:
        """The error body a router client would get: the engine's own body for passed-through
        errors, else an OpenAI envelope whose code names the kind."""
        if self.kind in (FaultKind.REJECTED, FaultKind.STREAM_ERROR) and self.body:
            try:
                json.loads(self.body)
            except ValueError:
                pass
            else:
                from .wire import is_error_data
                if is_error_data(self.body):
                    return self.body
                return b'{"error":' + self.body + b"}"  # vLLM before 0.10.1: the object bare
        return json.dumps({"error": {"message": self.message, "type": error_type(self.status),
                                     "param": None, "code": self.kind}},
                          ensure_ascii=False, separators=(",", ":")).encode()


def go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration.String writes it ("200ms", "1.5s", "1m30s"), so the
    messages match the router's byte for byte."""
    return go_duration_ns(int(seconds * 1_000_000_000))  # Go truncates the float product too


def go_duration_ns(d: int) -> str:
    """go_duration for a whole number of nanoseconds."""
    if d == 0:
        return "0s"
    sign = "-" if d < 0 else ""
    u = abs(d)

    def frac(v: int, prec: int) -> str:
        whole, part = divmod(v, 10 ** prec)
        digits = str(part).zfill(prec).rstrip("0")
        return f"{whole}.{digits}" if digits else str(whole)

    if u < 1_000_000_000:
        if u < 1_000:
            return f"{sign}{u}ns"
        if u < 1_000_000:
            return f"{sign}{frac(u, 3)}µs"
        return f"{sign}{frac(u, 6)}ms"
    whole, part = divmod(u, 1_000_000_000)
    digits = str(part).zfill(9).rstrip("0")
    s = f"{whole % 60}{'.' + digits if digits else ''}s"
    minutes = whole // 60
    if minutes:
        s = f"{minutes % 60}m{s}"
        hours = minutes // 60
        if hours:
            s = f"{hours}h{s}"
    return sign + s
