"""The Python client against real `narwhal sim` processes: the handoff with the KV really read,
each descriptor rejection, each timeout, same-worker decode, cancellation and stream faults.

Faults are injected with the simulator's directives (`@sim:<leg>.<fault>` in the prompt); what
is asserted is what a caller or an engine notices: tokens, statuses, messages, the bytes on the
engine's wire and the simulator's counters.
"""

import json
import threading
import time
import unittest

from helpers import Sim, SimPairTest, wait_until

from narwhal.engines.client import DecodeStream, EngineClient
from narwhal.engines.connector import PrefillResult
from narwhal.engines.faults import EngineFault

EXTRA = '"x_future":{"b":[1,2.50,"z"],"c":null},"x_unicode":"\\u00e9t\u00e9"'


def completion(prompt: str, **kw) -> dict:
    return dict({"model": "sim-model", "prompt": prompt, "max_tokens": 3, "stream": True}, **kw)


def texts(events) -> str:
    out = []
    for ev in events:
        if ev.kind == "token":
            out.extend(ch.get("text", "") for ch in ev.json()["choices"])
    return "".join(out)


class SimTest(SimPairTest):
    PRODUCER_ARGS = ("--descriptor-extra", EXTRA, "--itl", "5ms")

    def producer(self, **kw) -> EngineClient:
        kw.setdefault("engine_id", self.p0.engine_id)
        kw.setdefault("kv_endpoint", self.p0.kv_endpoint)
        return EngineClient(self.p0.url, name="p0", **kw)

    def consumer(self, **kw) -> EngineClient:
        return EngineClient(self.d0.url, name="d0", **kw)

    def recorded(self, sim: Sim, request_id: str, leg: str) -> dict:
        reqs = [r for r in sim.requests() if r["header"].get("X-Request-Id") == request_id and r["leg"] == leg]
        self.assertEqual(len(reqs), 1, f"{leg} legs with id {request_id} on {sim.name}")
        r = reqs[0]
        r["body"] = r["body"].encode()
        return r

    def assert_aborted(self, sim: Sim, before: int):
        wait_until(lambda: sim.stats()["aborted"] > before, 5, f"{sim.name}'s aborted counter to move")


class Handoff(SimTest):
    def test_prefill_then_decode_reads_the_kv_and_forwards_the_descriptor_verbatim(self):
        p_before, d_before = self.p0.stats(), self.d0.stats()
        request = completion("Explain disaggregated prefill in one paragraph please", max_tokens=4, min_tokens=2)
        res = self.producer().prefill(request, request_id="py-handoff-1")
        self.assertIsInstance(res, PrefillResult)
        self.assertEqual((res.producer, res.producer_url, res.endpoint, res.backend_request_id),
                         ("p0", self.p0.url, "completions", "py-handoff-1"))
        self.assertTrue(res.has_descriptor)
        # The producer pins the prompt's blocks the descriptor names, until the decode reads them.
        blocks = json.loads(res.descriptor)["remote_block_ids"]
        self.assertGreaterEqual(len(blocks), 1)
        self.assertEqual(self.p0.stats()["blocks_pinned"], p_before["blocks_pinned"] + len(blocks))

        # The prefill leg on the wire: one token, not streaming, the NIXL request parameters.
        leg = self.recorded(self.p0, "py-handoff-1", "prefill")
        sent = json.loads(leg["body"])
        self.assertEqual((sent["max_tokens"], sent["stream"]), (1, False))
        self.assertNotIn("min_tokens", sent)
        self.assertIs(sent["kv_transfer_params"]["do_remote_decode"], True)
        # The result keeps the producer's descriptor bytes exactly, opaque fields included
        # (a re-encoding would write 2.5 and é).
        self.assertTrue(res.descriptor.endswith(b"," + EXTRA.encode() + b"}"), res.descriptor)

        params = res.parameters()  # detached: mutating it changes nothing decode sends
        params["remote_host"] = "10.9.9.9"
        params["x_future"]["b"].append(99)
        self.assertEqual(res.parameters()["remote_host"], "127.0.0.1")

        with self.consumer().decode(res, request) as stream:
            self.assertIsInstance(stream, DecodeStream)
            events = list(stream)
        self.assertEqual(texts(events), " alpha beta gamma delta")
        self.assertEqual([e.kind for e in events][-2:], ["usage", "done"])
        self.assertEqual(events[-1].raw, b"data: [DONE]\n\n")

        p_after, d_after = self.p0.stats(), self.d0.stats()
        self.assertEqual(p_after["blocks_read"], p_before["blocks_read"] + len(blocks), "the consumer read the KV blocks")
        self.assertEqual(p_after["blocks_pinned"], p_before["blocks_pinned"])
        self.assertEqual(d_after["kv_loads"], d_before["kv_loads"] + 1)
        self.assertEqual(d_after["kv_load_failures"], d_before["kv_load_failures"])

        dec = self.recorded(self.d0, "py-handoff-1", "decode")
        self.assertIn(b'"kv_transfer_params":' + res.descriptor, dec["body"])
        self.assertNotIn(b"10.9.9.9", dec["body"])
        sent = json.loads(dec["body"])
        self.assertEqual((sent["max_tokens"], sent["min_tokens"], sent["stream"], sent["stream_options"]),
                         (4, 2, True, {"include_usage": True}))

    def test_chat_without_streaming_gets_an_assembled_response(self):
        request = {"model": "sim-model", "messages": [{"role": "user", "content": "hi there"}], "max_tokens": 3}
        res = self.producer().prefill(request)
        self.assertEqual(res.endpoint, "chat")
        blocks = self.p0.stats()["blocks_read"]
        out = self.consumer().decode(res, request)
        self.assertIsInstance(out, dict)
        self.assertEqual(out["object"], "chat.completion")
        self.assertEqual(out["choices"][0]["message"]["content"], " alpha beta gamma")
        self.assertEqual(out["choices"][0]["finish_reason"], "length")
        self.assertEqual(out["usage"]["completion_tokens"], 3)
        self.assertEqual(self.p0.stats()["blocks_read"], blocks + 1)

    def test_non_streaming_tool_calls_and_reasoning_are_assembled(self):
        request = {"model": "sim-model", "max_tokens": 20,
                   "messages": [{"role": "user", "content": "weather? @sim:decode.tool_call @sim:decode.reasoning=2"}]}
        out = self.consumer().decode(self.producer().prefill(request), request)
        msg, choice = out["choices"][0]["message"], out["choices"][0]
        self.assertEqual(choice["finish_reason"], "tool_calls")
        self.assertEqual([(c["type"], c["function"]["name"]) for c in msg["tool_calls"]], [("function", "get_weather")])
        self.assertEqual(json.loads(msg["tool_calls"][0]["function"]["arguments"]), {"city": "Oslo"})
        self.assertTrue(msg["reasoning"])

    def test_api_key_and_trace_headers_reach_the_engine(self):
        res = self.producer(api_key="sk-test").prefill(completion("hi"), request_id="py-hdr-1",
                                                       traceparent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        leg = self.recorded(self.p0, "py-hdr-1", "prefill")
        self.assertEqual(leg["header"].get("Authorization"), "Bearer sk-test")
        self.assertEqual(leg["header"].get("Traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        self.assertEqual(leg["header"].get("Content-Type"), "application/json")
        list(self.consumer().decode(res, completion("hi")))

    def test_same_worker_decode_strips_every_transfer_param(self):
        producer = self.producer()
        request = completion("same worker please", kv_transfer_params={"remote_host": "evil", "do_remote_prefill": True})
        res = producer.prefill(request, request_id="py-same-1")
        before = self.p0.stats()
        events = list(producer.decode(res, request))  # the producer decodes its own prefill
        self.assertEqual(texts(events), " alpha beta gamma")
        dec = self.recorded(self.p0, "py-same-1", "decode")
        self.assertNotIn(b"kv_transfer_params", dec["body"])
        self.assertNotIn(b"evil", dec["body"])
        after = self.p0.stats()
        self.assertEqual((after["kv_loads"], after["blocks_read"]), (before["kv_loads"], before["blocks_read"]))

    def test_client_transfer_params_never_reach_the_producer(self):
        request = completion("aimed elsewhere", kv_transfer_params={"remote_host": "evil", "remote_port": 1})
        res = self.producer().prefill(request, request_id="py-client-kv-1")
        leg = self.recorded(self.p0, "py-client-kv-1", "prefill")
        self.assertNotIn(b"evil", leg["body"])
        list(self.consumer().decode(res, request))

    def test_a_null_descriptor_decodes_without_transfer(self):
        request = completion("no handoff @sim:prefill.bad_descriptor=null")
        res = self.producer().prefill(request, request_id="py-null-1")
        self.assertFalse(res.has_descriptor)
        self.assertIsNone(res.parameters())
        self.assertEqual(texts(self.consumer().decode(res, request)), " alpha beta gamma")
        self.assertNotIn(b"kv_transfer_params", self.recorded(self.d0, "py-null-1", "decode")["body"])


class Rejections(SimTest):
    """Each rejection happens before the decode HTTP request: the consumer sees nothing."""

    def reject(self, prompt: str, reason: str, producer=None, consumer=None, decode_request=None):
        request = completion(prompt)
        res = (producer or self.producer()).prefill(request)
        before = self.d0.stats()
        with self.assertRaises(EngineFault) as cm:
            (consumer or self.consumer()).decode(res, decode_request or request)
        f = cm.exception
        self.assertEqual((f.kind, f.status, f.reason, f.leg, f.engine), ("invalid_descriptor", 502, reason, "prefill", "p0"))
        self.assertEqual(f.message, f"the producer's handoff descriptor failed validation ({reason})")
        self.assertNotIn("127.0.0.1", f.message)  # KV addresses stay out of the client's message
        after = self.d0.stats()
        self.assertEqual(after["decode_requests"], before["decode_requests"], "a decode request was sent")
        return f

    def test_missing_engine_identity(self):
        self.reject("x @sim:prefill.bad_descriptor=missing_engine", "missing_engine_identity")

    def test_engine_identity_not_the_pinned_one(self):
        f = self.reject("x @sim:prefill.wrong_engine_id", "missing_engine_identity")
        self.assertIn("pinned identity", f.cause.detail)

    def test_malformed_block_ids(self):
        f = self.reject("x @sim:prefill.bad_descriptor=bad_blocks", "malformed_block_ids")
        self.assertIn("1.5", f.cause.detail)

    def test_connector_mismatch(self):
        f = self.reject("x @sim:prefill.bad_descriptor=wrong_connector", "connector_mismatch")
        self.assertIn("transfer_id", f.cause.detail)

    def test_endpoint_mismatch_against_the_pinned_kv_endpoint(self):
        f = self.reject("x @sim:prefill.bad_descriptor=wrong_endpoint", "endpoint_mismatch")
        self.assertIn(self.p0.kv_endpoint, f.cause.detail)

    def test_a_chat_prefill_cannot_feed_a_completions_decode(self):
        chat = {"model": "sim-model", "messages": [{"role": "user", "content": "x"}], "stream": True}
        res = self.producer().prefill(chat)
        before = self.d0.stats()["decode_requests"]
        with self.assertRaises(EngineFault) as cm:
            self.consumer().decode(res, completion("x"))
        self.assertEqual((cm.exception.reason, cm.exception.status), ("endpoint_mismatch", 502))
        self.assertEqual(self.d0.stats()["decode_requests"], before)

    def test_a_transfer_mode_the_consumer_does_not_speak(self):
        grouped = Sim("p1", "prefill", "--kv-layout", "grouped")
        self.addCleanup(grouped.close)
        producer = EngineClient(grouped.url, name="p0", kv_allowed_ports=[grouped.kv_port])
        res = producer.prefill(completion("x"))
        self.assertEqual(res.parameters()["transfer_mode"], "pull")
        with self.assertRaises(EngineFault) as cm:
            self.consumer(transfer_modes=("push",)).decode(res, completion("x"))
        self.assertEqual(cm.exception.reason, "connector_mismatch")
        # the same handoff is fine for a consumer that pulls: grouped block ids are read
        blocks = grouped.stats()["blocks_read"]
        self.assertEqual(texts(self.consumer().decode(res, completion("x"))), " alpha beta gamma")
        self.assertGreater(grouped.stats()["blocks_read"], blocks)


class HandoffPolicy(SimTest):
    def test_a_stale_handoff_is_refused_before_the_decode_request(self):
        res = self.producer().prefill(completion("x"))
        before = self.d0.stats()["decode_requests"]
        with self.assertRaises(EngineFault) as cm:
            self.consumer().decode(res, completion("x"), max_handoff_age_s=1e-6)  # any real leg is older
        f = cm.exception
        self.assertEqual((f.kind, f.status, f.leg), ("stale_handoff", 502, "prefill"))
        self.assertRegex(f.message, r"^the handoff is [0-9.]+(ms|s) old, older than handoff.max_age_s \(1µs\)$")
        self.assertEqual(self.d0.stats()["decode_requests"], before)
        # a fresh enough handoff goes through
        res = self.producer().prefill(completion("x"))
        self.assertEqual(texts(self.consumer().decode(res, completion("x"), max_handoff_age_s=30)), " alpha beta gamma")

    def test_on_missing_fail_refuses_a_prefill_without_descriptor(self):
        request = completion("x @sim:prefill.bad_descriptor=null")
        res = self.producer().prefill(request)
        with self.assertRaises(EngineFault) as cm:
            self.consumer().decode(res, request, on_missing="fail")
        self.assertEqual((cm.exception.kind, cm.exception.status, cm.exception.message),
                         ("missing_descriptor", 502, "the producer returned no handoff descriptor"))


class Timeouts(SimTest):
    def test_prefill_timeout(self):
        before = self.p0.stats()["aborted"]
        start = time.monotonic()
        with self.assertRaises(EngineFault) as cm:
            self.producer(prefill_timeout_s=0.3).prefill(completion("x @sim:prefill.hang_headers"))
        f = cm.exception
        self.assertEqual((f.kind, f.status, f.leg), ("timeout", 504, "prefill"))
        self.assertEqual(f.message, "prefill engine did not answer within 300ms")
        self.assertLess(time.monotonic() - start, 2.0)
        self.assert_aborted(self.p0, before)

    def first_token_fault(self, directive: str, **timeouts) -> EngineFault:
        request = completion("x " + directive)
        res = self.producer().prefill(request)
        before = self.d0.stats()["aborted"]
        with self.assertRaises(EngineFault) as cm:
            self.consumer(**timeouts).decode(res, request)
        self.assert_aborted(self.d0, before)
        return cm.exception

    def test_first_token_timeout(self):
        f = self.first_token_fault("@sim:decode.hang_first_token", first_token_timeout_s=0.3)
        self.assertEqual((f.kind, f.status, f.message),
                         ("first_token_timeout", 504, "no token from the decode engine within 300ms"))

    def test_header_delay_consumes_the_first_token_budget(self):
        # 250 ms before the headers and 250 ms more to the first token: each alone fits 400 ms.
        f = self.first_token_fault("@sim:decode.slow_headers=250 @sim:decode.slow_first_token=250",
                                   first_token_timeout_s=0.4)
        self.assertEqual((f.kind, f.status), ("first_token_timeout", 504))

    def test_keepalive_comments_do_not_count_as_the_first_token(self):
        f = self.first_token_fault("@sim:decode.hang_first_token @sim:decode.keepalive=50", first_token_timeout_s=0.3)
        self.assertEqual(f.kind, "first_token_timeout")

    def test_silence_between_tokens(self):
        request = completion("x @sim:decode.silence_after=2", max_tokens=10)
        res = self.producer().prefill(request)
        before = self.d0.stats()["aborted"]
        stream = self.consumer(decode_read_timeout_s=0.2).decode(res, request)
        got = []
        with self.assertRaises(EngineFault) as cm:
            for ev in stream:
                got.append(ev)
        f = cm.exception
        self.assertEqual((f.kind, f.status, f.leg), ("silence", 504, "decode"))
        self.assertTrue(f.message.startswith("engine went silent between tokens"), f.message)
        self.assertEqual(f.message, "engine went silent between tokens (nothing for 200ms)")
        self.assertEqual(texts(got), " alpha beta")
        stream.close()
        self.assert_aborted(self.d0, before)

    def test_metadata_resets_the_silence_timer(self):
        slow = Sim("d1", "decode", "--itl", "300ms")
        self.addCleanup(slow.close)
        request = completion("x @sim:decode.keepalive=40", max_tokens=3)
        res = self.producer().prefill(request)
        consumer = EngineClient(slow.url, name="d1", decode_read_timeout_s=0.2)
        events = list(consumer.decode(res, request))  # 300 ms between tokens, a comment every 40 ms
        self.assertEqual(texts(events), " alpha beta gamma")
        self.assertIn("meta", [e.kind for e in events])
        # without the comments the same gaps are silence
        res = self.producer().prefill(completion("x", max_tokens=3))
        with self.assertRaises(EngineFault) as cm:
            list(consumer.decode(res, completion("x", max_tokens=3)))
        self.assertEqual(cm.exception.kind, "silence")

    def test_the_request_deadline_bounds_the_decode(self):
        request = completion("x @sim:decode.silence_after=1", max_tokens=10)
        res = self.producer().prefill(request)
        # decode_read_timeout_s=0: the stream is bounded by the request deadline alone
        stream = self.consumer(decode_read_timeout_s=0).decode(res, request, deadline=time.monotonic() + 0.5)
        with self.assertRaises(EngineFault) as cm:
            list(stream)
        self.assertEqual((cm.exception.kind, cm.exception.status), ("deadline_exceeded", 504))
        self.assertEqual(cm.exception.message, "the request deadline passed during the decode leg")

    def test_an_engine_that_is_not_listening_is_unreachable(self):
        client = EngineClient("http://127.0.0.1:1", name="gone")
        with self.assertRaises(EngineFault) as cm:
            client.prefill(completion("x"))
        self.assertEqual((cm.exception.kind, cm.exception.status), ("unreachable", 502))


class StreamFaults(SimTest):
    def decode_with(self, directive: str, **kw):
        request = completion("x " + directive, **kw)
        return self.consumer().decode(self.producer().prefill(request), request)

    def test_done_before_any_token(self):
        with self.assertRaises(EngineFault) as cm:
            self.decode_with("@sim:decode.done_first")
        self.assertEqual((cm.exception.kind, cm.exception.status, cm.exception.message),
                         ("done_before_token", 502, "stream ended with [DONE] before any token arrived"))

    def test_error_object_in_a_200_stream_keeps_its_own_status(self):
        stream = self.decode_with("@sim:decode.error_in_stream=503@2", max_tokens=5)
        got = []
        with self.assertRaises(EngineFault) as cm:
            for ev in stream:
                got.append(ev)
        f = cm.exception
        self.assertEqual((f.kind, f.status, f.engine_status), ("stream_error", 503, 503))
        self.assertEqual(texts(got), " alpha beta")
        env = json.loads(f.envelope())
        self.assertEqual((env["error"]["code"], env["error"]["type"]), (503, "Service Unavailable"))
        self.assertEqual(f.event.kind, "error")

    def test_error_object_before_any_token(self):
        with self.assertRaises(EngineFault) as cm:
            self.decode_with("@sim:decode.error_in_stream=400")
        self.assertEqual((cm.exception.kind, cm.exception.status), ("stream_error", 400))

    def test_stream_closed_before_done(self):
        stream = self.decode_with("@sim:decode.close_after=2", max_tokens=5)
        with self.assertRaises(EngineFault) as cm:
            list(stream)
        self.assertEqual((cm.exception.kind, cm.exception.status, cm.exception.message),
                         ("closed_early", 502, "stream closed before [DONE]"))

    def test_engine_statuses(self):
        for directive, kind, status in (("status=500", "engine_status", 502), ("status=429", "backpressure", 503),
                                        ("status=503", "backpressure", 503), ("status=400", "rejected", 400)):
            with self.subTest(directive):
                with self.assertRaises(EngineFault) as cm:
                    self.decode_with("@sim:decode." + directive)
                self.assertEqual((cm.exception.kind, cm.exception.status), (kind, status))
                if kind == "backpressure":
                    self.assertEqual(cm.exception.retry_after, "1")
                if kind == "rejected":
                    self.assertEqual(json.loads(cm.exception.envelope())["error"]["code"], 400)

    def test_prefill_engine_status(self):
        with self.assertRaises(EngineFault) as cm:
            self.producer().prefill(completion("x @sim:prefill.status=500"))
        self.assertEqual((cm.exception.kind, cm.exception.status, cm.exception.leg), ("engine_status", 502, "prefill"))


class Cancellation(SimTest):
    def test_closing_the_stream_aborts_the_engine_leg(self):
        request = completion("cancel me", max_tokens=16)
        res = self.producer().prefill(request)
        before = self.d0.stats()
        stream = self.consumer().decode(res, request)
        first = next(stream)
        self.assertEqual(first.kind, "token")
        stream.close()  # 15 tokens still to come, 10 ms apart
        self.assert_aborted(self.d0, before["aborted"])
        after = self.d0.stats()
        self.assertEqual(after["completed"], before["completed"])
        wait_until(lambda: self.d0.stats()["in_flight"] == 0, 5, "d0 to have nothing in flight")
        self.assertEqual(list(stream), [])

    def test_leaving_a_with_block_aborts_too(self):
        request = completion("cancel me too @sim:decode.silence_after=1", max_tokens=16)
        res = self.producer().prefill(request)
        before = self.d0.stats()["aborted"]
        with self.consumer().decode(res, request) as stream:
            next(stream)
        self.assert_aborted(self.d0, before)

    def test_closing_from_another_thread_unblocks_the_reader(self):
        request = completion("x @sim:decode.silence_after=1", max_tokens=16)
        res = self.producer().prefill(request)
        before = self.d0.stats()["aborted"]
        stream = self.consumer(decode_read_timeout_s=30).decode(res, request)
        next(stream)
        result = {}

        def read():
            try:
                result["events"] = list(stream)
            except EngineFault as e:
                result["fault"] = e

        t = threading.Thread(target=read)
        t.start()
        wait_until(lambda: self.d0.stats()["in_flight"] > 0, 5, "the stream to be open")
        stream.close()
        t.join(5)
        self.assertFalse(t.is_alive(), "the reader is still blocked")
        self.assertEqual(result["fault"].kind, "aborted")
        self.assert_aborted(self.d0, before)


if __name__ == "__main__":
    unittest.main()


class ConnectTimeouts(unittest.TestCase):
    """An engine whose listen backlog is full drops our SYN: the connect itself hangs."""

    def setUp(self):
        import socket
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.port = self.listener.getsockname()[1]
        self.fillers = []
        while True:  # connect until one hangs: from then on the backlog is full
            s = socket.socket()
            s.settimeout(0.2)
            self.fillers.append(s)
            try:
                s.connect(("127.0.0.1", self.port))
            except TimeoutError:
                break
            self.assertLess(len(self.fillers), 64, "the backlog never filled")

    def tearDown(self):
        for s in self.fillers:
            s.close()
        self.listener.close()

    def test_connect_timeout(self):
        client = EngineClient(f"http://127.0.0.1:{self.port}", connect_timeout_s=0.2)
        with self.assertRaises(EngineFault) as cm:
            client.prefill(completion("x"))
        self.assertEqual((cm.exception.kind, cm.exception.status, cm.exception.message),
                         ("timeout", 504, "could not connect to the engine in time"))

    def test_a_slow_connect_consumes_the_first_token_budget(self):
        client = EngineClient(f"http://127.0.0.1:{self.port}", connect_timeout_s=5, first_token_timeout_s=0.3)
        res = PrefillResult(producer="p", producer_url="http://p", endpoint="completions",
                            backend_request_id="x", started=time.monotonic(), completed=time.monotonic())
        with self.assertRaises(EngineFault) as cm:
            client.decode(res, completion("x"))
        self.assertEqual((cm.exception.kind, cm.exception.status, cm.exception.message),
                         ("first_token_timeout", 504, "no token from the decode engine within 300ms"))
