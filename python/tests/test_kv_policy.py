"""The router's KV endpoint policy and do_remote_decode rule, in the Python client, against real
`narwhal sim` producers whose descriptors point elsewhere (`--descriptor-extra` appends members;
the last of a repeated member is the one an engine reads, and the one validated).

The rules themselves are the shared vectors of testdata/contract/descriptors.json
(test_contract.py); these tests show them applied where a caller notices: a refused descriptor
never reaches the consumer, and an allowed one is really read.
"""

import unittest

from helpers import Sim

from narwhal.engines.client import EngineClient
from narwhal.engines.faults import EngineFault


def completion(prompt: str = "x") -> dict:
    return {"model": "sim-model", "prompt": prompt, "max_tokens": 3, "stream": True}


def texts(stream) -> str:
    return "".join(ch.get("text", "") for ev in stream if ev.kind == "token" for ch in ev.json()["choices"])


class KVEndpointPolicy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d0 = Sim("d0", "decode", "--itl", "5ms")

    @classmethod
    def tearDownClass(cls):
        cls.d0.close()

    def producer_sim(self, *args: str) -> Sim:
        p = Sim("p0", "prefill", *args)
        self.addCleanup(p.close)
        return p

    def assert_refused(self, producer: EngineClient, reason: str, detail: str) -> None:
        res = producer.prefill(completion())
        before = self.d0.stats()["decode_requests"]
        with self.assertRaises(EngineFault) as cm:
            EngineClient(self.d0.url, name="d0").decode(res, completion())
        f = cm.exception
        self.assertEqual((f.kind, f.status, f.reason), ("invalid_descriptor", 502, reason), f.cause)
        self.assertIn(detail, f.cause.detail)
        self.assertEqual(self.d0.stats()["decode_requests"], before, "the consumer received a decode request")

    def assert_handed_off(self, p: Sim, producer: EngineClient) -> None:
        blocks = p.stats()["blocks_read"]
        res = producer.prefill(completion())
        self.assertEqual(texts(EngineClient(self.d0.url, name="d0").decode(res, completion())), " alpha beta gamma")
        self.assertGreater(p.stats()["blocks_read"], blocks, "the consumer did not read the producer's KV")

    def test_an_unpinned_producer_may_point_at_its_own_host(self):
        p = self.producer_sim()
        self.assert_handed_off(p, EngineClient(p.url, name="p0", kv_allowed_ports=[p.kv_port]))

    def test_an_unpinned_producer_may_name_only_allowed_ports(self):
        # The simulator's KV port is a free one, outside vLLM's NIXL range: refused by default,
        # and so are ssh and redis on the producer's own host even when its KV port is allowed.
        p = self.producer_sim()
        self.assert_refused(EngineClient(p.url, name="p0"), "endpoint_mismatch",
                            "kv.allowed_ports do not include (5600-5663)")
        for port in (22, 6379):
            with self.subTest(port=port):
                q = self.producer_sim("--descriptor-extra", f'"remote_port":{port}')
                self.assert_refused(EngineClient(q.url, name="p0", kv_allowed_ports=[q.kv_port]), "endpoint_mismatch",
                                    f"127.0.0.1:{port}, on a port producer p0's kv.allowed_ports do not include")

    def test_the_router_s_own_ports_are_never_allowed(self):
        # A client working for a router passes the router's listener ports: a descriptor naming
        # one is refused even when kv_allowed_ports cover it; a pin may still name it.
        router = self.producer_sim()  # stands for the router's listener: a port that is taken
        port = int(router.url.rsplit(":", 1)[1])
        p = self.producer_sim("--descriptor-extra", f'"remote_port":{port}')
        self.assert_refused(EngineClient(p.url, name="p0", kv_allowed_ports=[f"{port}-{port}"], kv_reserved_ports=[port]),
                            "endpoint_mismatch", "a port of the router's own listeners")
        self.assert_refused(EngineClient(p.url, name="p0", kv_allowed_endpoints=["127.0.0.0/8"],
                                         kv_allowed_ports=[port], kv_reserved_ports=[port]),
                            "endpoint_mismatch", "a port of the router's own listeners")

    def test_allowed_ports_are_checked_when_given(self):
        for bad in (22, "22", [0], ["70000"], ["x"], [(5, 1)]):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError):
                    EngineClient("http://127.0.0.1:1", kv_allowed_ports=bad)
        c = EngineClient("http://127.0.0.1:1", kv_allowed_ports=[7000, "5600-5663", (8000, 8001)])
        self.assertEqual(c.kv.allowed_ports, ((7000, 7000), (5600, 5663), (8000, 8001)))

    def test_an_unpinned_producer_may_not_point_at_another_host(self):
        p = self.producer_sim("--descriptor-extra", '"remote_host":"10.1.2.3"')
        self.assert_refused(EngineClient(p.url, name="p0"), "endpoint_mismatch", "not producer p0's own host 127.0.0.1")

    def test_cloud_metadata_is_refused(self):
        p = self.producer_sim("--descriptor-extra", '"remote_host":"169.254.169.254","remote_port":80')
        self.assert_refused(EngineClient(p.url, name="p0"), "endpoint_mismatch", "link-local, metadata or unroutable")

    def test_a_host_name_is_not_resolved_to_match(self):
        # The producer's URL says localhost, its descriptor 127.0.0.1: not the same host as
        # written, so refused; an allow list covering it lets the handoff through.
        p = self.producer_sim()
        local = p.url.replace("127.0.0.1", "localhost")
        self.assert_refused(EngineClient(local, name="p0"), "endpoint_mismatch", "not producer p0's own host localhost")
        self.assert_handed_off(p, EngineClient(local, name="p0", kv_allowed_endpoints=["127.0.0.0/8"],
                                               kv_allowed_ports=[p.kv_port]))
        self.assert_handed_off(p, EngineClient(local, name="p0", kv_allowed_endpoints=[p.kv_endpoint]))

    def test_an_allow_list_replaces_the_same_host_rule(self):
        p = self.producer_sim()
        self.assert_refused(EngineClient(p.url, name="p0", kv_allowed_endpoints=["10.0.0.0/8"]),
                            "endpoint_mismatch", "allowed_endpoints do not include")

    def test_a_pinned_endpoint_wins(self):
        p = self.producer_sim()
        local = p.url.replace("127.0.0.1", "localhost")
        self.assert_handed_off(p, EngineClient(local, name="p0", kv_endpoint=p.kv_endpoint))

    def test_do_remote_decode_true_is_refused(self):
        p = self.producer_sim("--descriptor-extra", '"do_remote_decode":true')
        self.assert_refused(EngineClient(p.url, name="p0", kv_endpoint=p.kv_endpoint), "connector_mismatch",
                            "do_remote_decode is true")


class AllowedEndpointsArgument(unittest.TestCase):
    def test_bad_entries_are_refused_when_the_client_is_built(self):
        for bad in ("10.0.0.0/33", "10.0.0.0/08", "kv-gw", "kv-gw:0", "kv-gw:70000", "a/b:5600", "user@h:5600",
                    ":5600", "fd00::1:5600", "10.0.0.0/255.0.0.0"):
            with self.subTest(bad):
                with self.assertRaises(ValueError) as cm:
                    EngineClient("http://127.0.0.1:1", kv_allowed_endpoints=[bad])
                self.assertIn(repr(bad), str(cm.exception))
        with self.assertRaises(ValueError):
            EngineClient("http://127.0.0.1:1", kv_allowed_endpoints="10.0.0.0/8")  # one string, not a list

    def test_good_entries_are_kept(self):
        good = ("10.0.0.0/8", "10.1.2.3/16", "fd00::/8", "kv-gw.internal:5600", "[fd00::1]:5600", "10.0.0.5:5600")
        c = EngineClient("http://[fd00::9]:8000", kv_allowed_endpoints=good)
        self.assertEqual(c.kv.allowed_endpoints, good)
        self.assertEqual(c.kv.host, "fd00::9")


if __name__ == "__main__":
    unittest.main()
