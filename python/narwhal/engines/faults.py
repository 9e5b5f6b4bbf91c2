"""Engine leg failures, with the router's kinds, statuses and messages.

Every failure is an :class:`EngineFault`; its class says the family (a timeout, a connection
that failed, an error the engine itself reported, a handoff that may not be used, a leg the
caller ended) and ``kind`` the exact fault, as the router's metrics and error envelopes name it::

    EngineFault
    ├── EngineTimeoutError     timeout, first_token_timeout, silence, deadline_exceeded
    ├── EngineConnectionError  unreachable, closed_early, router_overloaded
    ├── EngineError            engine_status, backpressure, rejected, stream_error, bad_response,
    │                          done_before_token, held_overflow, response_too_large
    ├── HandoffError           invalid_descriptor, stale_handoff, missing_descriptor,
    │                          stale_engine_id
    └── LegCancelled           aborted, client_disconnected

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
    STALE_ENGINE_ID = "stale_engine_id"      # 502: the producer restarted (Mooncake engine id gone)
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
# stale_engine_id is a producer that restarted between two attempts: neither engine failed.
_NOT_ENGINES = {FaultKind.REJECTED, FaultKind.BACKPRESSURE, FaultKind.DEADLINE_EXCEEDED,
                FaultKind.CLIENT_DISCONNECTED, FaultKind.ABORTED, FaultKind.ROUTER_OVERLOADED,
                FaultKind.RESPONSE_TOO_LARGE, FaultKind.STALE_ENGINE_ID}

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


# Each kind's family: the name the shared vectors (testdata/contract/faults.json) give it, which
# the Go router's contract test checks against its own policy table.
FAMILY_TIMEOUT, FAMILY_CONNECTION, FAMILY_ENGINE, FAMILY_HANDOFF, FAMILY_CANCELLED = (
    "timeout", "connection", "engine", "handoff", "cancelled")
FAMILIES = {
    FaultKind.TIMEOUT: FAMILY_TIMEOUT, FaultKind.FIRST_TOKEN_TIMEOUT: FAMILY_TIMEOUT,
    FaultKind.SILENCE: FAMILY_TIMEOUT, FaultKind.DEADLINE_EXCEEDED: FAMILY_TIMEOUT,
    FaultKind.UNREACHABLE: FAMILY_CONNECTION, FaultKind.CLOSED_EARLY: FAMILY_CONNECTION,
    FaultKind.ROUTER_OVERLOADED: FAMILY_CONNECTION,
    FaultKind.ENGINE_STATUS: FAMILY_ENGINE, FaultKind.BACKPRESSURE: FAMILY_ENGINE,
    FaultKind.REJECTED: FAMILY_ENGINE, FaultKind.STREAM_ERROR: FAMILY_ENGINE,
    FaultKind.BAD_RESPONSE: FAMILY_ENGINE, FaultKind.DONE_BEFORE_TOKEN: FAMILY_ENGINE,
    FaultKind.HELD_OVERFLOW: FAMILY_ENGINE, FaultKind.RESPONSE_TOO_LARGE: FAMILY_ENGINE,
    FaultKind.INVALID_DESCRIPTOR: FAMILY_HANDOFF, FaultKind.STALE_HANDOFF: FAMILY_HANDOFF,
    FaultKind.MISSING_DESCRIPTOR: FAMILY_HANDOFF, FaultKind.STALE_ENGINE_ID: FAMILY_HANDOFF,
    FaultKind.ABORTED: FAMILY_CANCELLED, FaultKind.CLIENT_DISCONNECTED: FAMILY_CANCELLED,
}

# An engine's error message is shown in str(fault) up to this many characters.
_MAX_ENGINE_MESSAGE = 500


class EngineFault(Exception):
    """An engine leg failed.

    ``kind`` is one of :class:`FaultKind`; ``status`` the HTTP status the router would answer
    with (504 for timeout-shaped faults, 502 for other engine faults, an in-stream error's own
    code, a 4xx passed through); ``message`` what happened, in words a client may see (the
    router's message, the same as the Go client's). ``engine_status`` and ``body`` are what the
    engine sent, when it sent anything, and ``engine_message`` the message in that body;
    ``str(fault)`` carries both messages.

    A fault is an instance of its family's class (``EngineFault("timeout", ...)`` makes an
    :class:`EngineTimeoutError`), so ``except EngineTimeoutError`` catches every timeout and
    ``except EngineFault`` every failure.
    """

    family: Optional[str] = None  # set on each family's class

    def __new__(cls, kind: str, *args, **kwargs):
        if cls is EngineFault:
            cls = _FAMILY_CLASSES.get(FAMILIES.get(kind), EngineFault)
        elif FAMILIES.get(kind) != cls.family:
            raise ValueError(f"fault kind {kind!r} does not belong to {cls.__name__} (its family is {FAMILIES.get(kind)!r})")
        return super().__new__(cls)

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

    def __str__(self) -> str:
        s = f"{self.leg} leg on {self.engine}: {self.kind}: {self.message}"
        said = self.engine_message
        if said and said not in self.message:
            s += f": {said}"
        return s

    def __reduce__(self):
        # Rebuilt from its fields (the exception's args are its text, not its constructor's
        # arguments), so a fault crosses a process boundary (multiprocessing, concurrent.futures)
        # as itself. The cause is left behind: it may not pickle.
        return (_restore, (self.kind, self.leg, self.engine, self.message, self.engine_status, self.body,
                           self.reason, self.retry_after, self.event))

    @property
    def engine_message(self) -> str:
        """The error message in what the engine sent: an OpenAI error envelope's
        ``error.message``, vLLM's older flat ``message``, a web framework's ``detail``, or the
        start of a body that is not JSON; "" when the engine sent no body."""
        return engine_message(self.body)

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


class EngineTimeoutError(EngineFault):
    """A leg ran out of time: the prefill or connect timeout (``timeout``), no first token in
    time (``first_token_timeout``), silence between tokens (``silence``), or the request's own
    deadline or ``timeout=`` (``deadline_exceeded``). Status 504."""

    family = FAMILY_TIMEOUT


class EngineConnectionError(EngineFault):
    """The connection failed: the engine could not be reached or closed it before answering
    (``unreachable``), its stream ended before ``[DONE]`` (``closed_early``), or this process
    had no file descriptor or connection to spare (``router_overloaded``)."""

    family = FAMILY_CONNECTION


class EngineError(EngineFault):
    """The engine answered, with an error or with something the contract does not allow: a 5xx
    (``engine_status``), 429/503 (``backpressure``, ``retry_after`` kept), another 4xx passed
    through (``rejected``), an error inside its stream (``stream_error``), an unreadable or
    oversized answer (``bad_response``, ``held_overflow``, ``response_too_large``), ``[DONE]``
    before any token (``done_before_token``). ``engine_message`` is what it said."""

    family = FAMILY_ENGINE


class HandoffError(EngineFault):
    """The producer's handoff may not be used: its descriptor failed validation
    (``invalid_descriptor``, ``reason`` says which rule), it is older than
    ``max_handoff_age_s`` (``stale_handoff``), or there is none under ``on_missing="fail"``
    (``missing_descriptor``)."""

    family = FAMILY_HANDOFF


class LegCancelled(EngineFault):
    """The caller ended the leg: the stream was closed while it was being read (``aborted``),
    or the client went away (``client_disconnected``)."""

    family = FAMILY_CANCELLED


_FAMILY_CLASSES = {c.family: c for c in (EngineTimeoutError, EngineConnectionError, EngineError, HandoffError,
                                         LegCancelled)}


def _restore(kind, leg, engine, message, engine_status, body, reason, retry_after, event):
    return EngineFault(kind, leg, engine, message, engine_status=engine_status, body=body, reason=reason,
                       retry_after=retry_after, event=event)


def engine_message(body: bytes) -> str:
    """The error message in an engine's error body (see :attr:`EngineFault.engine_message`)."""
    if not body:
        return ""
    try:
        doc = json.loads(body)
    except ValueError:
        text = " ".join(body.decode("utf-8", "replace").split())
        return text[:_MAX_ENGINE_MESSAGE]
    msg = ""
    if isinstance(doc, dict):
        err = doc.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            msg = err["message"]
        elif isinstance(err, str):
            msg = err
        elif isinstance(doc.get("message"), str):  # vLLM before 0.10.1: the error object bare
            msg = doc["message"]
        elif isinstance(doc.get("detail"), str):  # FastAPI's own answers: {"detail": "Not Found"}
            msg = doc["detail"]
        elif isinstance(doc.get("detail"), list):  # FastAPI's validation errors
            msg = "; ".join(d["msg"] for d in doc["detail"] if isinstance(d, dict) and isinstance(d.get("msg"), str))
    return msg[:_MAX_ENGINE_MESSAGE]


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
