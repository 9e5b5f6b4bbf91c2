"""What the engine legs put on the wire: request body rewrites and SSE reading.

Internal API: it may change between releases.

The client's JSON is never decoded and re-encoded on its way to an engine. Its top-level
members are indexed as byte offsets and the leg bodies are spliced together member by member,
exactly as the Go router does (transport/wire/body.go, transport/wire/jsonscan.go), so the two produce
the same bytes; the shared vectors in testdata/contract/bodies.json hold them to it.
"""

from __future__ import annotations

import json
from typing import NamedTuple, Optional, Sequence

COMPLETIONS = "completions"
CHAT = "chat"
ENDPOINT_PATHS = {COMPLETIONS: "/v1/completions", CHAT: "/v1/chat/completions"}


class BadRequest(ValueError):
    """A request the client must fix; ``param`` names the offending field ("" for the body)."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param
        self.message = message


class Field(NamedTuple):
    key_start: int
    key_end: int  # the key including its quotes
    val_start: int
    val_end: int  # the value, whitespace trimmed


class NotObject(ValueError):
    pass


_SPACE = b" \t\n\r"


def skip_space(b: bytes, i: int) -> int:
    n = len(b)
    while i < n and b[i] in _SPACE:
        i += 1
    return i


def _skip_string(b: bytes, i: int) -> int:
    j = i + 1
    n = len(b)
    while j < n:
        c = b[j]
        if c == 0x5C:  # backslash
            j += 2
            continue
        if c == 0x22:
            return j + 1
        j += 1
    raise NotObject("unterminated string")


def skip_value(b: bytes, i: int) -> int:
    """Offset just past the JSON value starting at b[i] (b must be valid JSON)."""
    n = len(b)
    if i >= n:
        raise NotObject("truncated")
    c = b[i]
    if c == 0x22:
        return _skip_string(b, i)
    if c in b"{[":
        depth = 0
        j = i
        while j < n:
            c = b[j]
            if c == 0x22:
                j = _skip_string(b, j)
                continue
            if c in b"{[":
                depth += 1
            elif c in b"}]":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        raise NotObject("truncated")
    j = i
    while j < n and b[j] not in b",}] \t\n\r":
        j += 1
    return j


def scan_object(b: bytes) -> list[Field]:
    """Top-level members of the JSON object b, in order, without decoding any value."""
    i = skip_space(b, 0)
    if i >= len(b) or b[i] != 0x7B:
        raise NotObject("not a JSON object")
    fields: list[Field] = []
    i = skip_space(b, i + 1)
    if i < len(b) and b[i] == 0x7D:
        return fields
    while True:
        if i >= len(b) or b[i] != 0x22:
            raise NotObject("not a JSON object")
        ks = i
        ke = _skip_string(b, i)
        i = skip_space(b, ke)
        if i >= len(b) or b[i] != 0x3A:
            raise NotObject("not a JSON object")
        vs = skip_space(b, i + 1)
        ve = skip_value(b, vs)
        fields.append(Field(ks, ke, vs, ve))
        i = skip_space(b, ve)
        if i >= len(b):
            raise NotObject("not a JSON object")
        if b[i] == 0x2C:
            i = skip_space(b, i + 1)
        elif b[i] == 0x7D:
            return fields
        else:
            raise NotObject("not a JSON object")


def key_is(raw: bytes, want: str) -> bool:
    """Whether the quoted key raw names want, after JSON unescaping (as the engine reads it)."""
    inner = raw[1:-1]
    if b"\\" not in inner:
        return inner == want.encode()
    try:
        return json.loads(raw) == want
    except ValueError:
        return False


def last_field(b: bytes, fields: Sequence[Field], key: str) -> Optional[Field]:
    """The last member named key: JSON parsers keep the last duplicate, so the router must too."""
    for f in reversed(fields):
        if key_is(b[f.key_start:f.key_end], key):
            return f
    return None


class Edit(NamedTuple):
    key: str
    value: Optional[bytes]  # None drops the key
    only_if_present: bool = False


def rewrite_object(b: bytes, fields: Sequence[Field], edits: Sequence[Edit]) -> bytes:
    """b with edits applied: a replaced key keeps the position of its last occurrence (earlier
    duplicates are dropped), absent keys are appended in edit order, every other member is
    copied byte for byte."""
    out = bytearray(b"{")
    first = True
    done = [False] * len(edits)

    def member(raw_key: bytes, value: bytes) -> None:
        nonlocal first
        if not first:
            out.append(0x2C)
        first = False
        out.extend(raw_key)
        out.append(0x3A)
        out.extend(value)

    for fi, f in enumerate(fields):
        raw = b[f.key_start:f.key_end]
        ei = next((j for j, e in enumerate(edits) if key_is(raw, e.key)), -1)
        if ei < 0:
            member(raw, b[f.val_start:f.val_end])
            continue
        e = edits[ei]
        if e.value is None or any(key_is(b[g.key_start:g.key_end], e.key) for g in fields[fi + 1:]):
            continue
        member(raw, e.value)
        done[ei] = True
    for j, e in enumerate(edits):
        if done[j] or e.value is None or e.only_if_present:
            continue
        member(b'"' + e.key.encode() + b'"', e.value)
    out.append(0x7D)
    return bytes(out)


def is_null(v: bytes) -> bool:
    return v == b"null"


_USAGE_ONLY = b'{"include_usage":true}'


class ClientBody:
    """A validated request body: the caller's bytes plus the offsets of their members."""

    def __init__(self, raw: bytes, endpoint: str):
        if endpoint not in ENDPOINT_PATHS:
            raise BadRequest("", f"unknown endpoint {endpoint!r} (use {COMPLETIONS!r} or {CHAT!r})")
        self.raw = raw
        self.endpoint = endpoint
        try:
            json.loads(raw)
            self.fields = scan_object(raw)
        except NotObject:
            raise BadRequest("", "request body must be a JSON object") from None
        except ValueError:
            raise BadRequest("", "request body is not valid JSON") from None

        model = self._decoded("model")
        if model is None:
            raise BadRequest("model", "the model field is required")
        if not isinstance(model, str) or model == "":
            raise BadRequest("model", "model must be a non-empty string")
        self.model = model

        if endpoint == COMPLETIONS:
            v = self.member("prompt")
            if v is None or is_null(v):
                raise BadRequest("prompt", "the prompt field is required")
            if v[:1] not in (b'"', b"["):
                raise BadRequest("prompt", "prompt must be a string, an array of strings or an array of token ids")
        else:
            v = self.member("messages")
            if v is None or is_null(v):
                raise BadRequest("messages", "the messages field is required")
            if v[:1] != b"[" or v[skip_space(v, 1):skip_space(v, 1) + 1] == b"]":
                raise BadRequest("messages", "messages must be a non-empty array")

        self.stream = False
        stream = self._decoded("stream")
        if stream is not None:
            if not isinstance(stream, bool):
                raise BadRequest("stream", "stream must be true or false")
            self.stream = stream

        self.include_usage = False
        self.stream_options: Optional[bytes] = None
        so = self.member("stream_options")
        if so is not None and not is_null(so):
            parsed = json.loads(so)
            iu = parsed.get("include_usage") if isinstance(parsed, dict) else None
            if not isinstance(parsed, dict) or (iu is not None and not isinstance(iu, bool)):
                raise BadRequest("stream_options", 'stream_options must be an object like {"include_usage": true}')
            # vLLM defaults include_usage to true once stream_options is present.
            self.include_usage = iu is None or iu
            self.stream_options = so
        for key in ("max_tokens", "max_completion_tokens", "n"):
            n = self._decoded(key)
            if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
                raise BadRequest(key, f"{key} must be a positive integer")

    def member(self, key: str) -> Optional[bytes]:
        f = last_field(self.raw, self.fields, key)
        return None if f is None else self.raw[f.val_start:f.val_end]

    def _decoded(self, key: str):
        v = self.member(key)
        return None if v is None else json.loads(v)

    def prefill_body(self, kv_params: bytes) -> bytes:
        """The producer's body: stream off, no stream_options, one output token, no minimum,
        kv_params as kv_transfer_params, as the router's AppendPrefillBody writes it."""
        return rewrite_object(self.raw, self.fields, [
            Edit("max_tokens", b"1"),
            Edit("max_completion_tokens", b"1", True),
            Edit("min_tokens", None),
            Edit("min_completion_tokens", None),
            Edit("stream", b"false"),
            Edit("stream_options", None),
            Edit("kv_transfer_params", kv_params),
        ])

    def decode_body(self, kv_params: Optional[bytes]) -> bytes:
        """The consumer's body: streaming with usage, kv_params as kv_transfer_params; None
        removes the key, whoever put it there, as the router's AppendDecodeBody writes it."""
        if self.stream_options is None:
            so = _USAGE_ONLY
        elif self.include_usage:
            so = self.stream_options
        else:
            so = rewrite_object(self.stream_options, scan_object(self.stream_options),
                                [Edit("include_usage", b"true")])
        return rewrite_object(self.raw, self.fields, [
            Edit("stream", b"true"),
            Edit("stream_options", so),
            Edit("kv_transfer_params", kv_params),
        ])


def encode_request(request, endpoint: Optional[str] = None) -> ClientBody:
    """Accept a request as a dict (encoded compactly) or as JSON text/bytes (kept as given)."""
    if isinstance(request, ClientBody):
        return request
    if isinstance(request, dict):
        raw = json.dumps(request, ensure_ascii=False, separators=(",", ":")).encode()
        if endpoint is None:
            endpoint = CHAT if "messages" in request else COMPLETIONS
    elif isinstance(request, (bytes, bytearray, memoryview)):
        raw = bytes(request)
    elif isinstance(request, str):
        raw = request.encode()
    else:
        raise TypeError(f"request must be a dict or JSON text, not {type(request).__name__}")
    if endpoint is None:
        try:
            endpoint = CHAT if "messages" in json.loads(raw) else COMPLETIONS
        except (ValueError, TypeError):
            endpoint = COMPLETIONS  # ClientBody names the problem
    return ClientBody(raw, endpoint)


# --- SSE ---------------------------------------------------------------------------------

META, TOKEN, USAGE, DONE, ERROR = "meta", "token", "usage", "done", "error"

MAX_EVENT_BYTES = 4 << 20


def event_data(ev: bytes) -> Optional[bytes]:
    """The data payload of an event: data lines joined by newlines; None for comment-only."""
    parts = []
    for line in ev.split(b"\n"):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line.startswith(b"data:"):
            continue
        v = line[5:]
        if v[:1] == b" ":
            v = v[1:]
        parts.append(v)
    return b"\n".join(parts) if parts else None


def is_error_data(data: bytes) -> bool:
    i = skip_space(data, 0)
    if i >= len(data) or data[i] != 0x7B:
        return False
    i = skip_space(data, i + 1)
    return data[i:i + 7] == b'"error"'


def _non_empty(v) -> bool:
    return isinstance(v, str) and v != ""


def classify(data: Optional[bytes]) -> str:
    """What an event carries. A finish_reason counts as output (an engine may stop at once)."""
    if data is None:
        return META
    if data == b"[DONE]":
        return DONE
    if is_error_data(data):
        return ERROR
    try:
        c = json.loads(data)
    except ValueError:
        return META
    if not isinstance(c, dict):
        return META
    choices = c.get("choices")
    for ch in choices if isinstance(choices, list) else ():
        if not isinstance(ch, dict):
            continue
        if isinstance(ch.get("finish_reason"), str) or _non_empty(ch.get("text")):
            return TOKEN
        d = ch.get("delta")
        if isinstance(d, dict):
            tc = d.get("tool_calls")
            if (_non_empty(d.get("content")) or _non_empty(d.get("reasoning"))
                    or _non_empty(d.get("reasoning_content")) or (isinstance(tc, (list, dict)) and tc)):
                return TOKEN
    if not choices and c.get("usage") is not None:
        return USAGE
    return META


def classify_fast(data: Optional[bytes]) -> str:
    """classify for after the first token: only events that mention usage are decoded."""
    if data is None:
        return META
    if data == b"[DONE]":
        return DONE
    if is_error_data(data):
        return ERROR
    if b'"usage"' in data:
        return classify(data)
    return TOKEN


class StreamError(NamedTuple):
    status: int
    message: str
    type: str
    body: bytes  # the value of "error" as the engine sent it


def parse_stream_error(data: bytes) -> StreamError:
    """An error event's own status (its code; 500 when missing or implausible) and message."""
    raw = b"null"
    try:
        f = last_field(data, scan_object(data), "error")
        if f is not None:
            raw = data[f.val_start:f.val_end]
    except NotObject:
        pass
    try:
        e = json.loads(raw)
    except ValueError:
        e = None
    if not isinstance(e, dict):
        e = {}
    status = 500
    code = e.get("code")
    if isinstance(code, (int, float)) and not isinstance(code, bool) and 400 <= code <= 599:
        status = int(code)
    message = e.get("message") if isinstance(e.get("message"), str) else ""
    typ = e.get("type") if isinstance(e.get("type"), str) else ""
    return StreamError(status, message or "engine reported an error inside the stream", typ, raw)


class SSESplitter:
    """Splits a byte stream into SSE events, each with its raw bytes (blank line included)."""

    def __init__(self):
        self._buf = bytearray()
        self._ev = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf.extend(chunk)
        events = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                if len(self._ev) + len(self._buf) > MAX_EVENT_BYTES:
                    raise EventTooLarge()
                return events
            line = bytes(self._buf[:nl + 1])
            del self._buf[:nl + 1]
            if line in (b"\n", b"\r\n"):
                if not self._ev:
                    continue  # stray blank line between events
                self._ev.extend(line)
                events.append(bytes(self._ev))
                self._ev.clear()
                continue
            if len(self._ev) + len(line) > MAX_EVENT_BYTES:
                raise EventTooLarge()
            self._ev.extend(line)

    def pending(self) -> bool:
        """Whether a partial event is buffered (the stream ended inside an event)."""
        return bool(self._ev or self._buf)


class EventTooLarge(Exception):
    def __str__(self) -> str:
        return "engine sent an SSE event larger than 4 MiB"
