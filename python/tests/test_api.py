"""The package as a Python user meets it: names importable from ``narwhal.engines``, a type
marker, an exception class per fault family, messages that carry what the engine said,
``timeout=`` in seconds, and a URL with a path refused as the router refuses it."""

import pickle
import time
import unittest

from helpers import ROOT, SimPairTest, contract

import narwhal.engines as engines
from narwhal.engines import (EngineClient, EngineConnectionError, EngineError, EngineFault, EngineTimeoutError,
                             HandoffError, LegCancelled, PrefillResult)
from narwhal.engines import client as client_module, connector, faults, wire

FAMILY_CLASSES = {"timeout": EngineTimeoutError, "connection": EngineConnectionError, "engine": EngineError,
                  "handoff": HandoffError, "cancelled": LegCancelled}


class Names(unittest.TestCase):
    def test_the_package_re_exports_its_api(self):
        self.assertIs(engines.EngineClient, client_module.EngineClient)
        self.assertIs(engines.DecodeStream, client_module.DecodeStream)
        self.assertIs(engines.StreamEvent, client_module.StreamEvent)
        self.assertIs(engines.PrefillResult, connector.PrefillResult)
        self.assertIs(engines.EngineFault, faults.EngineFault)
        self.assertIs(engines.FaultKind, faults.FaultKind)
        self.assertIs(engines.BadRequest, wire.BadRequest)
        for name in engines.__all__:
            self.assertTrue(hasattr(engines, name), name)
        namespace = {}
        exec("from narwhal.engines import *", namespace)
        self.assertLessEqual({"EngineClient", "PrefillResult", "EngineFault", "EngineTimeoutError"}, set(namespace))

    def test_the_package_is_marked_typed(self):
        self.assertTrue((ROOT / "python" / "narwhal" / "py.typed").is_file())


class Families(unittest.TestCase):
    def test_every_kind_is_an_instance_of_its_family_class(self):
        kinds = contract("faults.json")["kinds"]
        for k in kinds:
            with self.subTest(k["kind"]):
                f = EngineFault(k["kind"], "decode", "d0", "m", engine_status=k["engine_status"])
                cls = FAMILY_CLASSES[k["family"]]
                self.assertIs(type(f), cls)
                self.assertIsInstance(f, EngineFault)
                self.assertEqual((f.kind, f.family, f.status), (k["kind"], k["family"], k["status"]))
                # a family class built directly keeps the kind too
                self.assertEqual(cls(k["kind"], "decode", "d0", "m").kind, k["kind"])
        self.assertEqual({k["kind"] for k in kinds}, set(faults.FAMILIES))

    def test_a_family_class_refuses_a_kind_of_another_family(self):
        with self.assertRaises(ValueError) as cm:
            EngineTimeoutError("rejected", "decode", "d0", "m")
        self.assertIn("'rejected' does not belong to EngineTimeoutError", str(cm.exception))

    def test_a_fault_survives_pickling(self):
        f = EngineFault("backpressure", "prefill", "p0", "engine is overloaded (429)", engine_status=429,
                        body=b'{"error":{"message":"queue full"}}', retry_after="2", cause=OSError("x"))
        g = pickle.loads(pickle.dumps(f))
        self.assertIs(type(g), EngineError)
        self.assertEqual((g.kind, g.leg, g.engine, g.message, g.engine_status, g.retry_after, str(g)),
                         (f.kind, f.leg, f.engine, f.message, f.engine_status, f.retry_after, str(f)))

    def test_the_engine_message_of_each_body_shape(self):
        for body, said in ((b'{"error":{"message":"The model `x` does not exist.","code":404}}', "The model `x` does not exist."),
                           (b'{"object":"error","message":"max_tokens is too large","code":400}', "max_tokens is too large"),
                           (b'{"detail":"Not Found"}', "Not Found"),
                           (b'{"detail":[{"loc":["body","model"],"msg":"Field required"}]}', "Field required"),
                           (b"<html>\n <h1>502 Bad Gateway</h1>\n</html>", "<html> <h1>502 Bad Gateway</h1> </html>"),
                           (b"", "")):
            with self.subTest(body):
                f = EngineFault("rejected", "decode", "d0", "engine rejected the request (404)", engine_status=404, body=body)
                self.assertEqual(f.engine_message, said)
                want = "decode leg on d0: rejected: engine rejected the request (404)" + (": " + said if said else "")
                self.assertEqual(str(f), want)


class URLs(unittest.TestCase):
    def test_shared_url_vectors(self):
        doc = contract("engine_urls.json")
        for v in doc["accepted"]:
            with self.subTest(v["url"]):
                self.assertEqual(EngineClient(v["url"]).url, v["base"])
        for v in doc["refused"]:
            with self.subTest(v["url"]):
                with self.assertRaises(ValueError) as cm:
                    EngineClient(v["url"])
                self.assertIn(v["error"], str(cm.exception))
                self.assertIn(repr(v["url"]), str(cm.exception))

    def test_a_fragment_is_refused_too(self):
        with self.assertRaises(ValueError):
            EngineClient("http://127.0.0.1:8000#v1")


class AgainstTheSimulator(SimPairTest):
    CONSUMER_ARGS = ("--itl", "20ms")

    def producer(self) -> EngineClient:
        return EngineClient(self.p0.url, name="p0", engine_id=self.p0.engine_id, kv_endpoint=self.p0.kv_endpoint)

    def test_a_404_says_what_the_engine_said(self):
        with self.assertRaises(EngineError) as cm:
            self.producer().prefill({"model": "no-such-model", "prompt": "x", "max_tokens": 2})
        f = cm.exception
        self.assertEqual((f.kind, f.status, f.engine_status, f.message),
                         ("rejected", 404, 404, "engine rejected the request (404)"))
        self.assertEqual(str(f), "prefill leg on p0: rejected: engine rejected the request (404): "
                                 "The model `no-such-model` does not exist.")

    def test_timeout_in_seconds_bounds_the_decode(self):
        request = {"model": "sim-model", "prompt": "x", "max_tokens": 200, "stream": True}  # 20 ms a token: 4 s
        result: PrefillResult = self.producer().prefill(request, timeout=10)
        consumer = EngineClient(self.d0.url, name="d0")
        start = time.monotonic()
        with self.assertRaises(EngineTimeoutError) as cm:
            with consumer.decode(result, request, timeout=0.3) as stream:
                for _ in stream:
                    pass
        elapsed = time.monotonic() - start
        self.assertEqual((cm.exception.kind, cm.exception.status), ("deadline_exceeded", 504))
        self.assertEqual(cm.exception.message, "the request deadline passed during the decode leg")
        self.assertLess(elapsed, 3.0)

    def test_timeout_in_seconds_bounds_the_prefill(self):
        with self.assertRaises(EngineTimeoutError) as cm:
            self.producer().prefill({"model": "sim-model", "prompt": "x @sim:prefill.hang_headers", "max_tokens": 2},
                                    timeout=0.3)
        self.assertEqual((cm.exception.kind, cm.exception.message),
                         ("deadline_exceeded", "the request deadline passed during the prefill leg"))

    def test_timeout_and_deadline_together_or_a_bad_timeout_are_refused(self):
        request = {"model": "sim-model", "prompt": "x", "max_tokens": 2}
        for kw in ({"timeout": 1, "deadline": time.monotonic() + 1}, {"timeout": 0}, {"timeout": -1},
                   {"timeout": float("nan")}, {"timeout": True}, {"timeout": "5"}):
            with self.subTest(kw):
                with self.assertRaises(ValueError):
                    self.producer().prefill(request, **kw)

    def test_an_unreachable_engine_is_a_connection_error(self):
        with self.assertRaises(EngineConnectionError) as cm:
            EngineClient("http://127.0.0.1:1", name="gone").prefill({"model": "m", "prompt": "x"})
        self.assertEqual(cm.exception.kind, "unreachable")

    def test_a_refused_descriptor_is_a_handoff_error(self):
        request = {"model": "sim-model", "prompt": "x", "max_tokens": 2, "stream": True}
        producer = EngineClient(self.p0.url, name="p0", engine_id="someone-else", kv_endpoint=self.p0.kv_endpoint)
        result = producer.prefill(request)
        with self.assertRaises(HandoffError) as cm:
            EngineClient(self.d0.url, name="d0").decode(result, request)
        self.assertEqual((cm.exception.kind, cm.exception.reason), ("invalid_descriptor", "missing_engine_identity"))


if __name__ == "__main__":
    unittest.main()
