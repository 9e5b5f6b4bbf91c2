"""KV handoff descriptors: their validation, the NIXL connector and :class:`PrefillResult`.

Internal API: it may change between releases.

A descriptor (a producer's ``kv_transfer_params``) is kept as the exact bytes the producer
sent; only the members validation needs are looked at, and ``decode`` splices those bytes into
its body unchanged, opaque runtime fields and key order included. The rules and
their messages mirror the Go router's (transport/kv: connector.go, nixl.go, descriptor.go,
endpoint.go); the shared vectors in testdata/contract/descriptors.json hold both to them.
"""

from __future__ import annotations

import ipaddress
import json
import re
import time
from dataclasses import dataclass, field as dc_field, replace
from typing import Optional

from .wire import Field, NotObject, last_field, scan_object, skip_space, skip_value

MISSING_ENGINE_IDENTITY = "missing_engine_identity"
MALFORMED_BLOCK_IDS = "malformed_block_ids"
CONNECTOR_MISMATCH = "connector_mismatch"
ENDPOINT_MISMATCH = "endpoint_mismatch"

MAX_DESCRIPTOR_BYTES = 1 << 20
MAX_BLOCK_IDS = 1 << 18
MAX_BLOCK_GROUPS = 64


class Rejection(Exception):
    """Why a descriptor may not reach the consumer: ``reason`` is one of the four page reasons,
    ``detail`` names what is wrong (engine identities and KV addresses included)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class KVSide:
    """One engine's KV transfer configuration."""

    engine: str
    connector: str = "nixl"
    engine_id: str = ""  # pinned producer identity ("" = not pinned)
    endpoint: str = ""  # pinned KV side channel host:port ("" = not pinned)
    transfer_modes: tuple = ("pull",)  # transfer_mode values accepted as a consumer
    # The engine's own host, from its URL: an unpinned producer's KV host must be it, unless
    # allowed_endpoints (CIDRs, host:port entries) says where else it may point. "" (a side
    # built by hand without a URL): no same-host check.
    host: str = ""
    allowed_endpoints: tuple = ()
    # The ports an unpinned producer's descriptor may name on its own host or on a host an
    # allowed_endpoints CIDR covers: (lo, hi) ranges, none meaning DEFAULT_ALLOWED_PORTS.
    # reserved_ports (the router's own listeners) are refused there whatever allowed_ports say.
    allowed_ports: tuple = ()
    reserved_ports: tuple = ()


@dataclass(frozen=True)
class Pair:
    producer: KVSide
    consumer: KVSide
    endpoint: str  # the decode call's API endpoint


class Descriptor:
    """A producer's descriptor: its raw bytes and the index of its members."""

    __slots__ = ("raw", "fields", "endpoint")

    def __init__(self, raw: bytes, endpoint: str):
        if len(raw) > MAX_DESCRIPTOR_BYTES:
            raise Rejection(CONNECTOR_MISMATCH,
                            f"descriptor is {len(raw)} bytes, more than the 1 MiB any connector sends")
        try:
            self.fields: list[Field] = scan_object(raw)
        except NotObject:
            raise Rejection(CONNECTOR_MISMATCH, "kv_transfer_params is not a JSON object") from None
        self.raw = raw
        self.endpoint = endpoint

    def member(self, key: str) -> Optional[bytes]:
        f = last_field(self.raw, self.fields, key)
        return None if f is None else self.raw[f.val_start:f.val_end]

    def string_member(self, key: str) -> Optional[str]:
        v = self.member(key)
        if v is None or v[:1] != b'"':
            return None
        try:
            s = json.loads(v)
        except ValueError:
            return None
        return s if isinstance(s, str) else None

    def int_member(self, key: str) -> Optional[int]:
        v = self.member(key)
        if v is None or not re.fullmatch(rb"[+-]?[0-9]+", v):
            return None
        n = int(v)
        return n if -(1 << 63) <= n < (1 << 63) else None


def excerpt(b: bytes) -> str:
    """At most 40 bytes of engine output, for a message."""
    if len(b) > 40:
        return b[:40].decode("utf-8", "ignore") + "…"
    return b.decode("utf-8", "ignore")


def _scan_block_id(v: bytes, i: int, where: str) -> int:
    j = i
    while j < len(v) and 0x30 <= v[j] <= 0x39:
        j += 1
    if j == i or j - i > 12 or (j < len(v) and v[j] not in b",] \n\t\r"):
        try:
            end = skip_value(v, i)
        except NotObject:
            end = len(v)
        raise Rejection(MALFORMED_BLOCK_IDS,
                        f"remote_block_ids{where} holds {excerpt(v[i:end])}, not a non-negative integer")
    return j


def check_block_ids(v: bytes) -> None:
    """A non-empty array of non-negative integers, or a non-empty array of such arrays (one per
    KV-cache group), within the bounds."""

    def bad(what: str) -> Rejection:
        return Rejection(MALFORMED_BLOCK_IDS, "remote_block_ids " + what)

    if not v or v[0] != 0x5B:
        raise bad(f"must be an array, got {excerpt(v)}")
    i = skip_space(v, 1)
    if i < len(v) and v[i] == 0x5D:
        raise bad("is empty")
    grouped = i < len(v) and v[i] == 0x5B
    total = groups = 0
    while i < len(v):
        if grouped:
            if v[i] != 0x5B:
                raise bad(f"mixes block ids and groups at element {groups}")
            groups += 1
            if groups > MAX_BLOCK_GROUPS:
                raise bad(f"has more than {MAX_BLOCK_GROUPS} groups")
            j = skip_space(v, i + 1)
            if j < len(v) and v[j] == 0x5D:
                raise bad(f"group {groups - 1} is empty")
            while True:
                end = _scan_block_id(v, j, f"[{groups - 1}]")
                total += 1
                if total > MAX_BLOCK_IDS:
                    raise bad(f"has more than {MAX_BLOCK_IDS} blocks")
                j = skip_space(v, end)
                if j >= len(v):
                    raise bad("is truncated")
                if v[j] == 0x5D:
                    i = j + 1
                    break
                if v[j] != 0x2C:
                    raise bad(f"group {groups - 1} is not a list of integers")
                j = skip_space(v, j + 1)
        else:
            i = _scan_block_id(v, i, "")
            total += 1
            if total > MAX_BLOCK_IDS:
                raise bad(f"has more than {MAX_BLOCK_IDS} blocks")
        i = skip_space(v, i)
        if i >= len(v):
            raise bad("is truncated")
        if v[i] == 0x5D:
            return
        if v[i] != 0x2C:
            raise bad("is not a list")
        i = skip_space(v, i + 1)
    raise bad("is truncated")


_FOREIGN_KEYS = ("transfer_id", "remote_bootstrap_addr", "bootstrap_room", "bootstrap_host", "bootstrap_port")

NIXL_PREFILL_PARAMS = (b'{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,'
                       b'"remote_block_ids":null,"remote_host":null,"remote_port":null}')


def _same_engine_id(got: str, pinned: str) -> bool:
    if got == pinned:
        return True
    if not got.startswith(pinned + "_dp"):
        return False
    rank = got[len(pinned) + 3:]
    return rank != "" and all("0" <= c <= "9" for c in rank)


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# The KV endpoint policy (the router's transport/kv/endpoint.go). A descriptor tells the consumer
# where to connect for the KV transfer, so an unconstrained producer (compromised or buggy) could
# point every consumer at any address: a cloud metadata service, the router's admin listener,
# another tenant. In this order:
#
#  1. a pinned endpoint (kv_endpoint): the descriptor must name exactly it;
#  2. an allow list (kv_allowed_endpoints: CIDRs, exact host:port entries): the descriptor's
#     endpoint must match one entry;
#  3. otherwise the KV host must be the producer's own host, as written in its URL, and must not
#     be a link-local, metadata, unspecified or multicast address.
#
# In the same-host case and for a CIDR entry the port must be an allowed one (kv_allowed_ports,
# by default vLLM's NIXL range 5600-5663) and never one of the router's own listeners
# (kv_reserved_ports): a producer must not send consumers to any other service on its host.
#
# Link-local and metadata addresses pass only when named (a pin, or an allow-list entry that
# covers them). The host must always be a bare host name or IP address.

METADATA_NAMES = ("metadata.google.internal", "metadata")
# Compared as addresses, so another spelling of one (fd00:ec2:0::254) is caught too.
METADATA_ADDRS = tuple(ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200"))

_HOST_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _parse_host(h: str):
    """The IP address h names (brackets allowed, no zone, IPv4-mapped IPv6 unmapped), or None."""
    s = h[1:] if h.startswith("[") else h
    s = s[:-1] if s.endswith("]") else s
    try:
        ip = ipaddress.ip_address(s)
    except ValueError:
        return None
    if getattr(ip, "scope_id", None):
        return None
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def parse_prefix(a: str):
    """The network of a CIDR entry (address/bits, the address unmasked allowed), or None."""
    addr, sep, bits = a.partition("/")
    if not sep or not (bits.isascii() and bits.isdigit()) or (len(bits) > 1 and bits[0] == "0"):
        return None
    try:
        ip = ipaddress.ip_address(addr)
    except ValueError:
        return None
    if getattr(ip, "scope_id", None) or int(bits) > ip.max_prefixlen:
        return None
    return ipaddress.ip_network(f"{addr}/{bits}", strict=False)


def _valid_host_name(h: str) -> bool:
    """DNS names: letters, digits, '-', '_' and dots, at most 253 bytes."""
    return 0 < len(h) <= 253 and h[0] not in ".-" and _HOST_NAME.fullmatch(h) is not None


def _forbidden(host: str, ip) -> bool:
    if host.removesuffix(".").lower() in METADATA_NAMES:
        return True
    if ip is not None and ip in METADATA_ADDRS:
        return True
    return ip is not None and (ip.is_link_local or ip.is_unspecified or ip.is_multicast)


# Where vLLM's NIXL connector listens for its side channel: VLLM_NIXL_SIDE_CHANNEL_PORT (5600
# unless set) up, one port per data-parallel rank; 64 ports cover up to 64 ranks.
DEFAULT_ALLOWED_PORTS = ((5600, 5663),)


def format_ports(ranges) -> str:
    """ranges as kv.allowed_ports writes them: "5600-5663, 7000"."""
    return ", ".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def parse_ports(ports) -> tuple:
    """kv_allowed_ports as given (ints, "lo-hi" strings or (lo, hi) pairs) as (lo, hi) ranges."""
    if isinstance(ports, (str, int)):
        raise ValueError("kv_allowed_ports must be a list of ports and ranges, not one value")
    out = []
    for p in ports:
        if isinstance(p, tuple) and len(p) == 2:
            lo, hi = p
        elif isinstance(p, int):
            lo = hi = p
        elif isinstance(p, str) and p.replace("-", "", 1).isdigit():
            a, _, b = p.partition("-")
            lo, hi = int(a), int(b or a)
        else:
            raise ValueError(f"kv allowed port {p!r} is not a port or a range (5600-5663)")
        if not (isinstance(lo, int) and isinstance(hi, int) and 1 <= lo <= hi <= 65535):
            raise ValueError(f"kv allowed port {p!r} is not a port or a range from 1 to 65535")
        out.append((lo, hi))
    return tuple(out)


def _check_port(got: str, port: int, producer: KVSide) -> None:
    """The port rule of the same-host and CIDR cases."""
    if port in producer.reserved_ports:
        raise Rejection(ENDPOINT_MISMATCH, f"descriptor names KV endpoint {got}, a port of the router's own "
                        "listeners (pin kv.endpoint to allow a port)")
    ranges = producer.allowed_ports or DEFAULT_ALLOWED_PORTS
    if any(lo <= port <= hi for lo, hi in ranges):
        return
    raise Rejection(ENDPOINT_MISMATCH, f"descriptor names KV endpoint {got}, on a port producer "
                    f"{producer.engine}'s kv.allowed_ports do not include ({format_ports(ranges)})")


def check_endpoint(host: str, port: int, producer: KVSide) -> None:
    """Apply the KV endpoint policy to the host and port a descriptor names."""
    got = _join_host_port(host, port)
    ip = _parse_host(host)
    if ip is None and not _valid_host_name(host):
        raise Rejection(ENDPOINT_MISMATCH, f"remote_host {excerpt(host.encode())} is not a host name or IP address")
    if producer.endpoint:
        if got.lower() != producer.endpoint.lower():
            raise Rejection(ENDPOINT_MISMATCH, f"descriptor names KV endpoint {got} but producer "
                            f"{producer.engine} is pinned to {producer.endpoint}")
        return
    if producer.allowed_endpoints:
        for a in producer.allowed_endpoints:
            net = parse_prefix(a)
            if net is not None:
                if ip is not None and ip.version == net.version and ip in net:
                    return _check_port(got, port, producer)
            elif a.lower() == got.lower():
                return
        raise Rejection(ENDPOINT_MISMATCH, f"descriptor names KV endpoint {got}, which producer "
                        f"{producer.engine}'s allowed_endpoints do not include")
    if _forbidden(host, ip):
        raise Rejection(ENDPOINT_MISMATCH, f"descriptor names KV endpoint {got}, a link-local, metadata or "
                        "unroutable address (allow it with kv.endpoint or kv.allowed_endpoints)")
    if not producer.host:
        return  # a side built without a URL: nothing to compare with
    pip = _parse_host(producer.host)
    if host.lower() == producer.host.lower() or (ip is not None and pip is not None and ip == pip):
        return _check_port(got, port, producer)
    raise Rejection(ENDPOINT_MISMATCH, f"descriptor names KV host {excerpt(host.encode())}, not producer "
                    f"{producer.engine}'s own host {producer.host} (pin kv.endpoint or set "
                    "kv.allowed_endpoints to allow others)")


def check_allowed_endpoint(a: str) -> None:
    """Raise ValueError unless a is a CIDR (10.0.0.0/8) or a host:port, as the router's
    engines[].kv.allowed_endpoints accepts them."""
    if parse_prefix(a) is not None:
        return
    if a.startswith("["):
        h, sep, port = a[1:].partition("]:")
    else:
        h, sep, port = a.rpartition(":")
        if ":" in h:
            sep = ""
    if not sep or not h or any(c in h for c in "/@ ") or not (port.isascii() and port.isdigit()) \
            or not 1 <= int(port) <= 65535:
        raise ValueError(f"kv allowed endpoint {a!r} is not allowed; want a CIDR (10.0.0.0/8) or a host:port")


class NixlConnector:
    """vLLM's NixlConnector (v1, v2 and the newest grouped shapes)."""

    name = "nixl"
    prefill_params = NIXL_PREFILL_PARAMS

    @staticmethod
    def validate(d: Descriptor, pair: Pair) -> None:
        for k in _FOREIGN_KEYS:
            if d.member(k) is not None:
                raise Rejection(CONNECTOR_MISMATCH, f"descriptor carries {k}, which belongs to another connector than nixl")
        if d.member("do_remote_prefill") != b"true":
            raise Rejection(CONNECTOR_MISMATCH, "do_remote_prefill is not true, so the consumer would not load the KV cache")
        v = d.member("transfer_mode")
        if v is not None and v != b"null":
            mode = d.string_member("transfer_mode")
            if mode is None or mode not in pair.consumer.transfer_modes:
                raise Rejection(CONNECTOR_MISMATCH, f"transfer_mode {excerpt(v)} is not one consumer "
                                f"{pair.consumer.engine} accepts ({', '.join(pair.consumer.transfer_modes)})")

        eid = d.string_member("remote_engine_id")
        if not eid:
            raise Rejection(MISSING_ENGINE_IDENTITY, "remote_engine_id is absent, empty or not a string")
        pin = pair.producer.engine_id
        if pin and not _same_engine_id(eid, pin):
            raise Rejection(MISSING_ENGINE_IDENTITY, f"remote_engine_id {json.dumps(eid)} is not producer "
                            f"{pair.producer.engine}'s pinned identity {json.dumps(pin)}")

        blocks = d.member("remote_block_ids")
        if blocks is None:
            raise Rejection(MALFORMED_BLOCK_IDS, "remote_block_ids is absent")
        check_block_ids(blocks)

        host = d.string_member("remote_host")
        port = d.int_member("remote_port")
        if not host or port is None or not 1 <= port <= 65535:
            raise Rejection(ENDPOINT_MISMATCH, "remote_host/remote_port do not name a KV endpoint "
                            "(need a host string and a port 1-65535)")
        check_endpoint(host, port, pair.producer)
        # Members that would flip the consumer's side of the protocol are refused rather than
        # rewritten (the descriptor is forwarded byte for byte): do_remote_decode true would make
        # the consumer hold its blocks for a remote decode that never comes, as a producer does.
        v = d.member("do_remote_decode")
        if v is not None and v != b"null" and v != b"false":
            raise Rejection(CONNECTOR_MISMATCH, f"do_remote_decode is {excerpt(v)}; a consumer must not be "
                            "asked to hand its KV cache on")


CONNECTORS = {"nixl": NixlConnector}


def lookup_connector(name: str):
    try:
        return CONNECTORS[name]
    except KeyError:
        raise ValueError(f"unknown KV connector {name!r} (known: {', '.join(sorted(CONNECTORS))})") from None


def validate_descriptor(d: Descriptor, pair: Pair) -> None:
    """Raise :class:`Rejection` unless d may be forwarded to pair's consumer as is."""
    if pair.producer.connector != pair.consumer.connector:
        raise Rejection(CONNECTOR_MISMATCH, f"producer {pair.producer.engine} uses connector "
                        f"{json.dumps(pair.producer.connector)} but consumer {pair.consumer.engine} "
                        f"uses {json.dumps(pair.consumer.connector)}")
    if d.endpoint != pair.endpoint:
        raise Rejection(ENDPOINT_MISMATCH, f"descriptor was produced for the {d.endpoint} endpoint, not {pair.endpoint}")
    try:
        c = lookup_connector(pair.producer.connector)
    except ValueError as e:
        raise Rejection(CONNECTOR_MISMATCH, str(e)) from None
    c.validate(d, pair)


@dataclass(frozen=True)
class PrefillResult:
    """What a prefill leg hands to the decode leg: the producer's descriptor, associated with
    the producer URL, the API endpoint and the backend request ID that produced it.

    Internal API: it may change between releases. Pass it to ``EngineClient.decode`` as is;
    :meth:`parameters` returns a detached dict for inspection.
    """

    producer: str
    producer_url: str
    endpoint: str
    backend_request_id: str
    started: float  # time.monotonic() when the prefill leg started (the handoff age counts from it)
    completed: float
    _descriptor: Optional[Descriptor] = dc_field(default=None, repr=False, compare=False)
    _producer_kv: Optional[KVSide] = dc_field(default=None, repr=False, compare=False)

    @property
    def has_descriptor(self) -> bool:
        """Whether the producer returned a descriptor (it may return null)."""
        return self._descriptor is not None

    @property
    def descriptor(self) -> Optional[bytes]:
        """The raw kv_transfer_params exactly as the producer sent them, or None."""
        return None if self._descriptor is None else self._descriptor.raw

    def parameters(self) -> Optional[dict]:
        """A detached dict of the descriptor: changing it changes nothing decode sends."""
        return None if self._descriptor is None else json.loads(self._descriptor.raw)

    def age(self, now: Optional[float] = None) -> float:
        """Seconds since the prefill leg started."""
        return (time.monotonic() if now is None else now) - self.started

    def without_transfer(self) -> "PrefillResult":
        """The result without its descriptor, for a decode that must not load remote KV."""
        return replace(self, _descriptor=None)


def parse_descriptor(raw: bytes, endpoint: str) -> Descriptor:
    """Index raw (a JSON object's text) as a descriptor made for endpoint."""
    return Descriptor(raw, endpoint)


__all__ = ["PrefillResult", "Rejection", "KVSide", "Pair", "Descriptor", "parse_descriptor",
           "validate_descriptor", "check_block_ids", "check_endpoint", "check_allowed_endpoint",
           "NixlConnector", "lookup_connector",
           "MISSING_ENGINE_IDENTITY", "MALFORMED_BLOCK_IDS", "CONNECTOR_MISMATCH", "ENDPOINT_MISMATCH"]

