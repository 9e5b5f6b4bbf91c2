"""The shared contract vectors (testdata/contract/*.json), run against the Python client.

The Go router runs the same files in the package that owns each part, so the two clients cannot
drift: transport/kv/contract_test.go (descriptors), transport/wire/contract_test.go (leg
bodies), transport/fault/contract_test.go (the fault table) and transport/contract_test.go
(the scripted engine answers).
"""

import json
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from helpers import contract, read_repo_file

from narwhal.engines import wire
from narwhal.engines.client import EngineClient
from narwhal.engines.connector import (KVSide, NIXL_PREFILL_PARAMS, Pair, PrefillResult, Rejection,
                                       parse_descriptor, validate_descriptor)
from narwhal.engines.faults import EngineFault, error_type, go_duration


def descriptor_of(case: dict) -> bytes:
    if "fixture" in case:
        body = read_repo_file(case["fixture"])
        f = wire.last_field(body, wire.scan_object(body), "kv_transfer_params")
        return body[f.val_start:f.val_end]
    raw = case["descriptor"].encode()
    if "block_ids_repeat" in case:
        blocks = b"[" + b"1," * (case["block_ids_repeat"] - 1) + b"1]"
        raw = raw.replace(b'"remote_block_ids":[0,1,2]', b'"remote_block_ids":' + blocks)
    return raw


def side(defaults: dict, override: dict) -> KVSide:
    d = dict(defaults, **(override or {}))
    return KVSide(engine=d["engine"], connector=d["connector"], engine_id=d["engine_id"],
                  endpoint=d["endpoint"], transfer_modes=tuple(d["transfer_modes"]),
                  host=d.get("host", ""), allowed_endpoints=tuple(d.get("allowed_endpoints", ())),
                  allowed_ports=tuple((r["lo"], r["hi"]) for r in d.get("allowed_ports", ())),
                  reserved_ports=tuple(d.get("reserved_ports", ())))


class DescriptorVectors(unittest.TestCase):
    def test_descriptor_validation(self):
        doc = contract("descriptors.json")
        self.assertGreater(len(doc["cases"]), 40)
        for case in doc["cases"]:
            with self.subTest(case["name"]):
                ep = case.get("endpoint", "completions")
                pair = Pair(side(doc["producer"], case.get("producer")), side(doc["consumer"], case.get("consumer")),
                            case.get("decode_endpoint", ep))
                raw = descriptor_of(case)
                try:
                    validate_descriptor(parse_descriptor(raw, ep), pair)
                    rej = None
                except Rejection as e:
                    rej = e
                want = case["want"]
                if want is None:
                    self.assertIsNone(rej, f"rejected: {rej}")
                    continue
                self.assertIsNotNone(rej, "accepted")
                self.assertEqual(rej.reason, want["reason"], rej.detail)
                self.assertIn(want["detail_contains"], rej.detail)


class BodyVectors(unittest.TestCase):
    def test_leg_bodies(self):
        doc = contract("bodies.json")
        self.assertEqual(doc["prefill_params"].encode(), NIXL_PREFILL_PARAMS)
        for case in doc["cases"]:
            with self.subTest(case["name"]):
                b = wire.ClientBody(case["client"].encode(), case["endpoint"])
                if case["leg"] == "prefill":
                    got = b.prefill_body(NIXL_PREFILL_PARAMS)
                else:
                    kv = case["kv"]
                    got = b.decode_body(None if kv is None else kv.encode())
                want = read_repo_file(case["want_fixture"]) if "want_fixture" in case else case["want"].encode()
                self.assertEqual(got, want)
                json.loads(got)
                if case["leg"] == "decode" and case["kv"] is not None:
                    self.assertIn(b'"kv_transfer_params":' + case["kv"].encode(), got)

    def test_rejections(self):
        for case in contract("bodies.json")["rejections"]:
            with self.subTest(case["name"]):
                with self.assertRaises(wire.BadRequest) as cm:
                    wire.ClientBody(case["client"].encode(), case["endpoint"])
                self.assertEqual(cm.exception.param, case["param"], cm.exception.message)


class HostileEngine:
    """A test engine that answers every request with the current case's scripted response."""

    def __init__(self):
        self.response = None
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                r = engine.response
                if r["then"] != "hang_headers":
                    self.send_response(r["status"])
                    self.send_header("Content-Type", r["content_type"])
                    if "retry_after" in r:
                        self.send_header("Retry-After", r["retry_after"])
                    self.end_headers()
                    body = r.get("body", "").encode()
                    if "body_fixture" in r:  # JSON files are served trimmed, SSE files as they are
                        body = read_repo_file(r["body_fixture"], strip=not r["body_fixture"].endswith(".sse"))
                    self.wfile.write(body)
                    self.wfile.flush()
                if r["then"] != "end":
                    self.connection.settimeout(10)
                    try:
                        self.rfile.read(1)  # until the client hangs up
                    except OSError:
                        pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class FaultVectors(unittest.TestCase):
    def test_kinds(self):
        for k in contract("faults.json")["kinds"]:
            with self.subTest(f"{k['kind']} {k['engine_status']}"):
                f = EngineFault(k["kind"], "decode", "e", "m", engine_status=k["engine_status"])
                self.assertEqual(f.status, k["status"])
                self.assertEqual(error_type(f.status), k["type"])
                self.assertEqual(f.retriable, k["retriable"])
                self.assertEqual(f.counts_against_engine, k["counts_against_engine"])

    def test_durations(self):
        for seconds, text in contract("faults.json")["durations"]:
            self.assertEqual(go_duration(seconds), text)

    def test_engine_answers(self):
        doc = contract("faults.json")
        engine = HostileEngine()
        self.addCleanup(engine.close)
        client = EngineClient(engine.url, name="hostile", **doc["timeouts"])
        for case in doc["cases"]:
            with self.subTest(case["name"]):
                engine.response = case["response"]
                self.run_case(client, case)

    def run_case(self, client, case):
        want = case["want"]
        request = {"model": "m", "stream": True}
        request.update({"messages": [{"role": "user", "content": "x"}]} if case["endpoint"] == "chat" else {"prompt": "x"})
        events, fault, raised_at = [], None, None
        if case["leg"] == "prefill":
            try:
                res = client.prefill(request, endpoint=case["endpoint"])
            except EngineFault as e:
                fault, raised_at = e, "prefill"
            else:
                if want.get("descriptor_from_body"):
                    body = read_repo_file(case["response"]["body_fixture"])
                    f = wire.last_field(body, wire.scan_object(body), "kv_transfer_params")
                    self.assertEqual(res.descriptor, body[f.val_start:f.val_end])
                else:
                    self.assertIsNone(res.descriptor)
                    self.assertFalse(res.has_descriptor)
        else:
            res = PrefillResult(producer="none", producer_url="http://none", endpoint=case["endpoint"],
                                backend_request_id="contract-1", started=0, completed=0)
            try:
                stream = client.decode(res, request, endpoint=case["endpoint"])
            except EngineFault as e:
                fault, raised_at = e, "decode"
            else:
                with stream:
                    try:
                        for ev in stream:
                            events.append(ev.kind)
                    except EngineFault as e:
                        fault, raised_at = e, "stream"
        self.assertEqual(events, want.get("events", []))
        self.assertEqual(raised_at, want.get("raised"), fault)
        if fault is None:
            return
        self.assertEqual((fault.kind, fault.status, fault.message), (want["kind"], want["status"], want["message"]))
        if "reason" in want:
            self.assertEqual(fault.reason, want["reason"])
        if "retry_after" in want:
            self.assertEqual(fault.retry_after, want["retry_after"])
        if "envelope" in want or "envelope_fixture" in want:
            env = want["envelope"].encode() if "envelope" in want else read_repo_file(want["envelope_fixture"])
            self.assertEqual(fault.envelope(), env)
        else:
            self.assertEqual(json.loads(fault.envelope()), {"error": {
                "message": want["message"], "type": error_type(want["status"]), "param": None, "code": want["kind"]}})


if __name__ == "__main__":
    unittest.main()

