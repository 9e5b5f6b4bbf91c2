"""``EngineClient``: the prefill and decode legs against one vLLM-compatible engine.

Internal API: it may change between releases.

The same contract the Narwhal router enforces (the legs' bodies, descriptor validation,
timeouts, fault kinds and messages), for Python callers that drive a prefill/decode pair
themselves::

    from narwhal.engines import EngineClient, PrefillResult

    producer = EngineClient("http://127.0.0.1:8100")
    consumer = EngineClient("http://127.0.0.1:8200")
    request = {"model": "sim-model", "prompt": "Hello", "max_tokens": 8, "stream": True}
    result: PrefillResult = producer.prefill(request, timeout=30)
    with consumer.decode(result, request, timeout=120) as stream:
        for event in stream:
            ...

Standard library only (``http.client``, ``json``). One connection per leg, closed when the leg
ends: closing a stream before ``[DONE]`` closes the engine connection, so the engine aborts the
sequence. Synchronous only; there are no async variants.
"""

from __future__ import annotations

import errno
import http.client
import json
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Iterator, Optional, Union
from urllib.parse import urlsplit

from . import wire
from .connector import (KVSide, Pair, PrefillResult, Rejection, check_allowed_endpoint, lookup_connector, parse_ports,
                        parse_descriptor, validate_descriptor)
from .faults import DECODE, PREFILL, EngineFault, FaultKind, go_duration, go_duration_ns

MAX_PREFILL_BODY = 16 << 20
MAX_ERROR_BODY = 64 << 10
_READ = 64 << 10


@dataclass(frozen=True)
class StreamEvent:
    """One SSE event of a decode stream. ``raw`` is its bytes, terminating blank line
    included, ready to relay; ``data`` its payload (None for a comment); ``kind`` one of
    ``meta``, ``token``, ``usage``, ``done``, ``error``."""

    raw: bytes
    data: Optional[bytes]
    kind: str

    def json(self):
        """The payload decoded, or None for a comment or ``[DONE]``."""
        if self.data is None or self.kind == wire.DONE:
            return None
        return json.loads(self.data)


class _Timeout(Exception):
    """A leg's own budget ran out (raised before a read that would start past it)."""


class EngineClient:
    """Speaks to one engine: the prefill leg, the decode leg.

    Internal API: it may change between releases.

    ``url`` is the engine's base URL, ``http(s)://host[:port]`` with no path (a URL such as
    ``http://host:8000/v1`` raises ValueError, as the router refuses it). ``api_key`` is sent as ``Authorization: Bearer``.
    ``connector`` is the KV connector (only ``"nixl"`` today). As a producer, ``engine_id`` and
    ``kv_endpoint`` pin the identity and KV side channel its descriptors must name; without a
    pin, a descriptor's KV endpoint must be in ``kv_allowed_endpoints`` (CIDRs such as
    ``"10.0.0.0/8"``, exact ``"host:port"`` entries) when that is given, else on this engine's
    own host (never a link-local or metadata address), as the router's
    ``engines[].kv.endpoint`` and ``kv.allowed_endpoints`` decide; on its own host or a CIDR's, on
    a port of ``kv_allowed_ports`` (ports or ``"lo-hi"`` ranges; by default vLLM's NIXL range
    5600-5663) and never on one of ``kv_reserved_ports`` (the ports of the router's own
    listeners, when the client works for one), as the router's ``kv.allowed_ports`` decide. As a consumer,
    ``transfer_modes`` lists the ``transfer_mode`` values it accepts. The timeouts
    are the router's ``engine.*`` settings with the same defaults; ``decode_read_timeout_s=0``
    bounds a stream by the request deadline alone.
    """

    def __init__(self, url: str, *, api_key: Optional[str] = None, connector: str = "nixl",
                 name: Optional[str] = None, engine_id: str = "", kv_endpoint: str = "",
                 kv_allowed_endpoints=(), kv_allowed_ports=(), kv_reserved_ports=(),
                 transfer_modes=("pull",), prefill_timeout_s: float = 60.0,
                 first_token_timeout_s: float = 60.0, decode_read_timeout_s: float = 30.0,
                 connect_timeout_s: float = 5.0):
        u = _base_url(url)
        lookup_connector(connector)
        if isinstance(kv_allowed_endpoints, str):
            raise ValueError("kv_allowed_endpoints must be a list of CIDRs and host:port entries, not one string")
        for a in kv_allowed_endpoints:
            check_allowed_endpoint(a)
        allowed_ports = parse_ports(kv_allowed_ports)
        reserved_ports = tuple(p for lo, hi in parse_ports(kv_reserved_ports) for p in range(lo, hi + 1))
        for key, v in (("prefill_timeout_s", prefill_timeout_s), ("first_token_timeout_s", first_token_timeout_s),
                       ("connect_timeout_s", connect_timeout_s)):
            if not v > 0:
                raise ValueError(f"{key} must be positive, got {v!r}")
        if not decode_read_timeout_s >= 0:
            raise ValueError(f"decode_read_timeout_s must be zero or positive, got {decode_read_timeout_s!r}")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)  # _base_url refused port 0
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.url = f"{u.scheme}://{host}:{self.port}"
        self.name = name or f"{host}:{self.port}"
        self._auth = f"Bearer {api_key}" if api_key else None
        self.connector = connector
        self.kv = KVSide(engine=self.name, connector=connector, engine_id=engine_id, endpoint=kv_endpoint,
                         transfer_modes=tuple(transfer_modes), host=self.host,
                         allowed_endpoints=tuple(kv_allowed_endpoints), allowed_ports=allowed_ports,
                         reserved_ports=reserved_ports)
        self.prefill_timeout_s = float(prefill_timeout_s)
        self.first_token_timeout_s = float(first_token_timeout_s)
        self.decode_read_timeout_s = float(decode_read_timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)

    def __repr__(self) -> str:
        return f"EngineClient({self.url!r}, name={self.name!r})"

    # --- the legs ---------------------------------------------------------------------------

    def prefill(self, request, *, endpoint: Optional[str] = None, request_id: Optional[str] = None,
                timeout: Optional[float] = None, deadline: Optional[float] = None,
                traceparent: Optional[str] = None, tracestate: Optional[str] = None) -> PrefillResult:
        """Run the prefill leg: a non-streaming one-token request whose generated token is
        discarded; return the producer's descriptor as a :class:`PrefillResult`.

        ``request`` is the client request (a dict, or JSON text kept byte for byte);
        ``endpoint`` is ``"completions"`` or ``"chat"`` (default: chat when it has
        ``messages``). ``request_id`` is the backend request ID both legs carry (default: a
        fresh one). ``timeout`` bounds the call in seconds (the router's ``request.deadline_s``;
        ``prefill_timeout_s`` still bounds the leg); ``deadline`` is the same bound as a
        ``time.monotonic()`` value, for one deadline shared by both legs. Past either, the call
        raises :class:`EngineTimeoutError` with kind ``deadline_exceeded``. Raises
        :class:`EngineFault` (one of its family classes) or ``wire.BadRequest``.
        """
        deadline = _request_deadline(timeout, deadline)
        body = wire.encode_request(request, endpoint)
        rid = request_id or "nw-" + uuid.uuid4().hex
        start = time.monotonic()
        leg_deadline, by_request = _earliest(start + self.prefill_timeout_s, deadline)
        payload = body.prefill_body(lookup_connector(self.connector).prefill_params)
        detail = f"prefill engine did not answer within {go_duration(self.prefill_timeout_s)}"
        conn, resp, sock = self._open(PREFILL, body.endpoint, payload, rid, traceparent, tracestate,
                                      leg_deadline, by_request, FaultKind.TIMEOUT, detail)
        try:
            raw = _read_all(sock, resp, leg_deadline, MAX_PREFILL_BODY)
        except BaseException as e:
            _abort(conn, resp, sock)
            raise self._leg_fault(PREFILL, e, by_request, FaultKind.TIMEOUT, detail) from e
        resp.close()
        conn.close()
        sock.close()
        if resp.status != 200:
            raise self._status_fault(PREFILL, resp, raw)
        try:
            json.loads(raw)
        except ValueError:
            raise self._fault(PREFILL, FaultKind.BAD_RESPONSE, "prefill response is not valid JSON") from None
        try:
            fields = wire.scan_object(raw)
        except wire.NotObject:
            raise self._fault(PREFILL, FaultKind.BAD_RESPONSE, "prefill response is not a JSON object") from None
        f = wire.last_field(raw, fields, "kv_transfer_params")
        descriptor = None
        if f is not None and not wire.is_null(raw[f.val_start:f.val_end]):
            try:
                descriptor = parse_descriptor(raw[f.val_start:f.val_end], body.endpoint)
            except Rejection as rej:
                raise self._descriptor_fault(rej, self.name) from None
        return PrefillResult(producer=self.name, producer_url=self.url, endpoint=body.endpoint,
                             backend_request_id=rid, started=start, completed=time.monotonic(),
                             _descriptor=descriptor, _producer_kv=self.kv)

    def decode(self, result: PrefillResult, request, *, endpoint: Optional[str] = None,
               timeout: Optional[float] = None, deadline: Optional[float] = None, traceparent: Optional[str] = None,
               tracestate: Optional[str] = None, max_handoff_age_s: Optional[float] = None,
               on_missing: str = "recompute") -> Union["DecodeStream", dict]:
        """Run the decode leg on this engine with ``result``'s handoff.

        The descriptor is validated before any byte is sent. When this engine is the producer
        (same-worker decode) every transfer parameter is removed, the caller's too. Returns
        once the first generated token has arrived (``engine.first_token_timeout_s`` covers
        connecting, the response headers and that wait): a :class:`DecodeStream` of the
        events for a streaming request, else the assembled OpenAI response as a dict.

        The router's handoff policy is opt-in here: ``max_handoff_age_s`` (handoff.max_age_s)
        refuses a handoff older than that, counted from the start of the prefill leg;
        ``on_missing="fail"`` (handoff.on_missing) refuses a result without a descriptor,
        which otherwise decodes without transfer parameters (the engine recomputes).

        ``timeout`` (seconds from this call) or ``deadline`` (a ``time.monotonic()`` value)
        bounds the whole decode, the stream's iteration included, as the router's
        ``request.deadline_s`` does; the leg's own timeouts still apply within it.
        Raises :class:`EngineFault` (one of its family classes).
        """
        deadline = _request_deadline(timeout, deadline)
        body = wire.encode_request(request, endpoint)
        if on_missing not in ("recompute", "fail"):
            raise ValueError(f"on_missing must be 'recompute' or 'fail', not {on_missing!r}")
        same_worker = self.same_worker(result)
        if not same_worker and not result.has_descriptor and on_missing == "fail":
            raise EngineFault(FaultKind.MISSING_DESCRIPTOR, PREFILL, result.producer,
                              "the producer returned no handoff descriptor")
        if max_handoff_age_s is not None:
            age = result.age()
            if age > max_handoff_age_s:
                raise EngineFault(FaultKind.STALE_HANDOFF, PREFILL, result.producer,
                                  f"the handoff is {go_duration_ns(round(age * 1000) * 1_000_000)} old, "
                                  f"older than handoff.max_age_s ({go_duration(max_handoff_age_s)})")
        start = time.monotonic()
        params = None
        if result.has_descriptor and not same_worker:
            # A result built by hand has no producer side: its URL's host is the producer's.
            producer_kv = result._producer_kv or KVSide(engine=result.producer,
                                                        host=urlsplit(result.producer_url).hostname or "")
            try:
                validate_descriptor(result._descriptor, Pair(producer_kv, self.kv, body.endpoint))
            except Rejection as rej:
                raise self._descriptor_fault(rej, result.producer) from None
            params = result.descriptor
        leg_deadline, by_request = _earliest(start + self.first_token_timeout_s, deadline)
        payload = body.decode_body(params)
        detail = self._first_token_detail()
        conn, resp, sock = self._open(DECODE, body.endpoint, payload, result.backend_request_id, traceparent,
                                      tracestate, leg_deadline, by_request, FaultKind.FIRST_TOKEN_TIMEOUT, detail)
        stream = DecodeStream(self, conn, resp, sock, deadline, body.endpoint)
        try:
            if resp.status != 200:
                try:
                    raw = _read_all(sock, resp, leg_deadline, MAX_ERROR_BODY, truncate=True)
                except Exception:
                    raw = b""
                raise self._status_fault(DECODE, resp, raw)
            ct = resp.getheader("Content-Type", "")
            if not ct.startswith("text/event-stream"):
                raise self._fault(DECODE, FaultKind.BAD_RESPONSE, f"decode response is not an event stream ({ct})")
            stream._await_first_token(leg_deadline, by_request)
        except BaseException:
            stream.close()
            raise
        if body.stream:
            return stream
        with stream:
            asm = _Assembler(body.endpoint)
            for ev in stream:
                if ev.data is not None and ev.kind != wire.DONE:
                    asm.add(ev.data)
            return asm.body()

    def same_worker(self, result: PrefillResult) -> bool:
        """Whether this engine produced result, so its decode must not load remote KV."""
        return result.producer_url == self.url

    # --- plumbing ---------------------------------------------------------------------------

    def _open(self, leg, endpoint, payload, rid, traceparent, tracestate, leg_deadline, by_request,
              timeout_kind, timeout_detail):
        headers = {"Content-Type": "application/json", "X-Request-Id": rid}
        if traceparent:
            headers["traceparent"] = traceparent
            if tracestate:
                headers["tracestate"] = tracestate
        if self._auth:
            headers["Authorization"] = self._auth
        left = leg_deadline - time.monotonic()
        if left <= 0:
            raise self._timeout_fault(leg, by_request, timeout_kind, timeout_detail)
        connect_budget_binding = self.connect_timeout_s < left
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=min(left, self.connect_timeout_s))
        try:
            conn.connect()
        except TimeoutError as e:
            conn.close()
            if connect_budget_binding:
                raise self._fault(leg, FaultKind.TIMEOUT, "could not connect to the engine in time", e) from e
            raise self._timeout_fault(leg, by_request, timeout_kind, timeout_detail, e) from e
        except BaseException as e:
            conn.close()
            raise self._leg_fault(leg, e, by_request, timeout_kind, timeout_detail) from e
        sock = conn.sock
        try:
            _set_timeout(sock, leg_deadline)
            conn.request("POST", wire.ENDPOINT_PATHS[endpoint], body=payload, headers=headers)
            _set_timeout(sock, leg_deadline)
            resp = conn.getresponse()
        except BaseException as e:
            _abort(conn, None, sock)
            raise self._leg_fault(leg, e, by_request, timeout_kind, timeout_detail) from e
        return conn, resp, sock

    def _first_token_detail(self) -> str:
        return f"no token from the decode engine within {go_duration(self.first_token_timeout_s)}"

    def _fault(self, leg, kind, message, cause=None, **kw) -> EngineFault:
        return EngineFault(kind, leg, self.name, message, cause=cause, **kw)

    def _timeout_fault(self, leg, by_request, kind, detail, cause=None) -> EngineFault:
        if by_request:
            return self._fault(leg, FaultKind.DEADLINE_EXCEEDED, f"the request deadline passed during the {leg} leg", cause)
        return self._fault(leg, kind, detail, cause)

    def _leg_fault(self, leg, e, by_request, timeout_kind, timeout_detail) -> EngineFault:
        if isinstance(e, EngineFault):
            return e
        if isinstance(e, (TimeoutError, _Timeout)):
            return self._timeout_fault(leg, by_request, timeout_kind, timeout_detail, e)
        if isinstance(e, _TooLarge):
            return self._fault(leg, FaultKind.BAD_RESPONSE, "engine response is too large", e)
        if isinstance(e, OSError) and e.errno in (errno.EMFILE, errno.ENFILE):
            return self._fault(leg, FaultKind.ROUTER_OVERLOADED, "the router has no connection to spare", e)
        if isinstance(e, (OSError, http.client.HTTPException)):
            return self._fault(leg, FaultKind.UNREACHABLE,
                               "could not reach the engine or it closed the connection before answering", e)
        raise e

    def _descriptor_fault(self, rej: Rejection, producer: str) -> EngineFault:
        # The message carries only the reason: the detail names identities and KV addresses.
        return EngineFault(FaultKind.INVALID_DESCRIPTOR, PREFILL, producer,
                           f"the producer's handoff descriptor failed validation ({rej.reason})",
                           reason=rej.reason, cause=rej)

    def _status_fault(self, leg, resp, body: bytes) -> EngineFault:
        s = resp.status
        if s in (429, 503):
            return self._fault(leg, FaultKind.BACKPRESSURE, f"engine is overloaded ({s})", engine_status=s,
                               body=body, retry_after=resp.getheader("Retry-After", ""))
        if 400 <= s < 500:
            return self._fault(leg, FaultKind.REJECTED, f"engine rejected the request ({s})", engine_status=s, body=body)
        return self._fault(leg, FaultKind.ENGINE_STATUS, f"engine failed ({s})", engine_status=s, body=body)


class DecodeStream:
    """An open decode leg whose first generated token has arrived: iterate it for
    :class:`StreamEvent` s (metadata held before the first token comes out first, ``[DONE]``
    last). A failure after the first token raises :class:`EngineFault` from the iteration.
    ``close()`` (or leaving a ``with`` block) before ``[DONE]`` closes the engine connection,
    which aborts the sequence on the engine. Internal API: it may change between releases."""

    def __init__(self, client: EngineClient, conn, resp, sock, deadline: Optional[float], endpoint: str):
        self._c = client
        self._conn = conn
        self._resp = resp
        self._sock = sock
        self._deadline = deadline
        self.endpoint = endpoint
        self.engine = client.name
        self.first_token_at: Optional[float] = None
        self._split = wire.SSESplitter()
        self._ready: list[bytes] = []
        self._held: list[StreamEvent] = []
        self._done = False
        self._closed = False

    def __iter__(self) -> Iterator[StreamEvent]:
        return self

    def __enter__(self) -> "DecodeStream":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _await_first_token(self, deadline: float, by_request: bool) -> None:
        while True:
            ev = self._read_event(deadline, by_request, True)
            data = wire.event_data(ev)
            kind = wire.classify(data)
            if kind == wire.DONE:
                raise self._c._fault(DECODE, FaultKind.DONE_BEFORE_TOKEN,
                                     "stream ended with [DONE] before any token arrived")
            if kind == wire.ERROR:
                raise self._stream_fault(data, StreamEvent(ev, data, kind))
            self._held.append(StreamEvent(ev, data, kind))
            if kind == wire.TOKEN:
                self.first_token_at = time.monotonic()
                return

    def __next__(self) -> StreamEvent:
        if self._held:
            return self._held.pop(0)
        if self._closed:
            raise StopIteration
        rt = self._c.decode_read_timeout_s
        deadline, by_request = self._deadline, True
        if rt > 0:
            deadline, by_request = _earliest(time.monotonic() + rt, self._deadline)
        ev = self._read_event(deadline, by_request, False)
        data = wire.event_data(ev)
        kind = wire.classify_fast(data)
        event = StreamEvent(ev, data, kind)
        if kind == wire.DONE:
            self._done = True
            self.close()  # the leg is over: release the connection without waiting for the caller
        elif kind == wire.ERROR:
            self._done = True
            self.close()
            raise self._stream_fault(data, event)
        return event

    def _stream_fault(self, data: bytes, event: StreamEvent) -> EngineFault:
        se = wire.parse_stream_error(data)
        return self._c._fault(DECODE, FaultKind.STREAM_ERROR, se.message, engine_status=se.status,
                              body=b'{"error":' + se.body + b"}", event=event)

    def _read_event(self, deadline: Optional[float], by_request: bool, before_first: bool) -> bytes:
        c = self._c
        while not self._ready:
            try:
                chunk = _read_some(self._sock, self._resp, deadline)
                if not chunk:
                    raise EOFError
                self._ready.extend(self._split.feed(chunk))
            except BaseException as e:
                closed_by_caller = self._closed
                self._done = True
                self.close()  # nothing more can be read: abort the leg
                if closed_by_caller:
                    raise c._fault(DECODE, FaultKind.ABORTED, "the decode stream was closed", e) from None
                if isinstance(e, (TimeoutError, _Timeout)):
                    if by_request and deadline is not None:
                        raise c._fault(DECODE, FaultKind.DEADLINE_EXCEEDED,
                                       "the request deadline passed during the decode leg", e) from None
                    if before_first:
                        raise c._fault(DECODE, FaultKind.FIRST_TOKEN_TIMEOUT, c._first_token_detail(), e) from None
                    raise c._fault(DECODE, FaultKind.SILENCE, "engine went silent between tokens (nothing for "
                                   + go_duration(c.decode_read_timeout_s) + ")", e) from None
                if isinstance(e, wire.EventTooLarge):
                    raise c._fault(DECODE, FaultKind.BAD_RESPONSE, str(e), e) from None
                if isinstance(e, (EOFError, OSError, http.client.HTTPException, ValueError)):
                    raise c._fault(DECODE, FaultKind.CLOSED_EARLY, "stream closed before [DONE]", e) from None
                raise
        return self._ready.pop(0)

    def close(self) -> None:
        """Release the stream; before ``[DONE]`` this aborts the engine's sequence. Safe to call
        from another thread while the stream is being read."""
        if self._closed:
            return
        self._closed = True
        _abort(self._conn, self._resp, self._sock)


# --- helpers -------------------------------------------------------------------------------

class _TooLarge(Exception):
    pass


def _base_url(url: str):
    """The engine's base URL, split; refused as the router refuses engines[].url: a scheme other
    than http or https, no host, a port outside 1-65535, or a path, query or fragment (the
    client adds /v1/... itself, so "http://host:8000/v1" would call /v1/v1/...)."""
    if not isinstance(url, str):
        raise TypeError(f"engine url must be a string, not {type(url).__name__}")
    u = urlsplit(url)
    if u.scheme not in ("http", "https") or not u.hostname or u.path not in ("", "/") or u.query or u.fragment:
        raise ValueError(f"{url!r} is not an engine base URL; write http://host:port or https://host:port (no path)")
    try:
        port = u.port
    except ValueError:
        port = -1
    if port is not None and not 1 <= port <= 65535:
        raise ValueError(f"{url!r} has port {u.netloc.rpartition(':')[2]}; want a port from 1 to 65535")
    return u


def _request_deadline(timeout: Optional[float], deadline: Optional[float]) -> Optional[float]:
    """The request's deadline as a time.monotonic() value, from timeout= seconds or deadline=."""
    if timeout is None:
        return deadline
    if deadline is not None:
        raise ValueError("pass timeout= (seconds) or deadline= (a time.monotonic() value), not both")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return time.monotonic() + timeout


def _earliest(leg: float, request: Optional[float]):
    """The earlier of a leg's own deadline and the request's, and whether the request's binds."""
    if request is not None and request <= leg:
        return request, True
    return leg, False


def _set_timeout(sock, deadline: Optional[float]) -> None:
    if deadline is None:
        sock.settimeout(None)
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Timeout()
    sock.settimeout(left)


def _read_some(sock, resp, deadline: Optional[float]) -> bytes:
    _set_timeout(sock, deadline)
    return resp.read1(_READ)


def _read_all(sock, resp, deadline: float, limit: int, truncate: bool = False) -> bytes:
    out = bytearray()
    while True:
        chunk = _read_some(sock, resp, deadline)
        if not chunk:
            return bytes(out)
        out.extend(chunk)
        if len(out) > limit:
            if truncate:
                return bytes(out[:limit])
            raise _TooLarge()


def _abort(conn, resp, sock) -> None:
    """Close the connection at once (the engine sees the disconnect and frees the sequence).
    The socket is shut down first: the response's file object keeps the descriptor open
    otherwise."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    if resp is not None:
        resp.close()
    conn.close()
    sock.close()


class _Choice:
    def __init__(self):
        self.text: list[str] = []
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.reasoning_key = ""
        self.role = ""
        self.finish_reason = None
        self.stop_reason = None
        self.tool_calls: dict[int, dict] = {}
        self.lp: dict[str, list] = {"tokens": [], "token_logprobs": [], "top_logprobs": [],
                                    "text_offset": [], "content": []}
        self.saw_logprobs = False


class _Assembler:
    """The non-streaming response built from the chunks of a decode stream, as the router does
    (transport/wire/assemble.go): text/content/reasoning concatenated per choice, tool-call deltas
    merged by index, logprobs concatenated, the last finish_reason, usage from its chunk."""

    def __init__(self, endpoint: str):
        self.endpoint = endpoint
        self.id, self.created, self.model = "", 0, ""
        self.usage = None
        self.choices: dict[int, _Choice] = {}

    def add(self, data: bytes) -> None:
        try:
            c = json.loads(data)
        except ValueError:
            return
        if not isinstance(c, dict):
            return
        if not self.id:
            self.id, self.created, self.model = c.get("id") or "", c.get("created") or 0, c.get("model") or ""
        if c.get("usage") is not None:
            self.usage = c["usage"]
        for ch in c.get("choices") or ():
            acc = self.choices.setdefault(ch.get("index", 0), _Choice())
            if isinstance(ch.get("text"), str):
                acc.text.append(ch["text"])
            if ch.get("finish_reason") is not None:
                acc.finish_reason = ch["finish_reason"]
                acc.stop_reason = ch.get("stop_reason")
            lp = ch.get("logprobs")
            if isinstance(lp, dict):
                acc.saw_logprobs = True
                for k in acc.lp:
                    acc.lp[k].extend(lp.get(k) or ())
            d = ch.get("delta")
            if not isinstance(d, dict):
                continue
            if d.get("role"):
                acc.role = d["role"]
            if isinstance(d.get("content"), str):
                acc.content.append(d["content"])
            if isinstance(d.get("reasoning"), str):
                acc.reasoning.append(d["reasoning"])
                acc.reasoning_key = "reasoning"
            elif isinstance(d.get("reasoning_content"), str):
                acc.reasoning.append(d["reasoning_content"])
                acc.reasoning_key = acc.reasoning_key or "reasoning_content"
            for tc in d.get("tool_calls") or ():
                t = acc.tool_calls.setdefault(tc.get("index", 0), {"id": "", "type": "", "name": "", "args": []})
                if tc.get("id"):
                    t["id"] = tc["id"]
                if tc.get("type"):
                    t["type"] = tc["type"]
                fn = tc.get("function") or {}
                if fn.get("name"):
                    t["name"] = fn["name"]
                t["args"].append(fn.get("arguments") or "")

    def body(self) -> dict:
        choices = []
        for i in sorted(self.choices):
            acc = self.choices[i]
            if self.endpoint == wire.COMPLETIONS:
                lp = None
                if acc.saw_logprobs:
                    lp = {k: acc.lp[k] for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset")}
                choices.append({"index": i, "text": "".join(acc.text), "logprobs": lp,
                                "finish_reason": acc.finish_reason, "stop_reason": acc.stop_reason})
                continue
            content = "".join(acc.content)
            msg = {"role": acc.role or "assistant", "content": content}
            if acc.reasoning_key:
                msg[acc.reasoning_key] = "".join(acc.reasoning)
            calls = [{"id": t["id"], "type": t["type"] or "function",
                      "function": {"name": t["name"], "arguments": "".join(t["args"])}}
                     for _, t in sorted(acc.tool_calls.items())]
            msg["tool_calls"] = calls
            if calls and content == "":
                msg["content"] = None
            choices.append({"index": i, "message": msg,
                            "logprobs": {"content": acc.lp["content"]} if acc.saw_logprobs else None,
                            "finish_reason": acc.finish_reason, "stop_reason": acc.stop_reason})
        obj = "text_completion" if self.endpoint == wire.COMPLETIONS else "chat.completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "choices": choices, "usage": self.usage}


__all__ = ["EngineClient", "DecodeStream", "StreamEvent", "EngineFault", "FaultKind", "PrefillResult"]
