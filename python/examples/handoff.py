"""Drive one prefill/decode handoff of a simulated Narwhal fleet by hand.

    ./narwhal sim fleet --prefill 2 --decode 2 --ttft 40ms --itl 30ms --tokens 24 > /tmp/fleet.json &
    python3 python/examples/handoff.py /tmp/fleet.json

(`narwhal sim fleet` starts the simulated engines `narwhal demo` embeds, and prints their URLs.)
"""

import json
import sys
import time
import urllib.request

from narwhal.engines import EngineClient, EngineFault, PrefillResult


def read_fleet(path: str, timeout: float = 10.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:  # the fleet writes its one JSON line once it listens
        try:
            with open(path) as f:
                line = f.readline()
            if line.endswith("\n"):
                return {e["name"]: e for e in json.loads(line)["engines"]}
        except FileNotFoundError:
            pass
        if time.monotonic() > deadline:
            sys.exit(f"no fleet description in {path}")
        time.sleep(0.05)


def main() -> None:
    fleet = read_fleet(sys.argv[1] if len(sys.argv) > 1 else "/tmp/fleet.json")
    p, d = fleet["p0"], fleet["d0"]
    # Pinning the producer's identity and KV endpoint makes decode check the descriptor names them.
    producer = EngineClient(p["url"], name="p0", engine_id=p["engine_id"], kv_endpoint=p["kv_endpoint"])
    consumer = EngineClient(d["url"], name="d0", first_token_timeout_s=5, decode_read_timeout_s=2)

    request = {"model": "sim-model", "prompt": "Explain disaggregated prefill in one paragraph.",
               "max_tokens": 8, "stream": True}
    try:
        result: PrefillResult = producer.prefill(request, timeout=30)
        print("prefill:", result.producer, result.endpoint, result.backend_request_id)
        print("descriptor:", result.parameters())  # a detached copy, for inspection
        with consumer.decode(result, request, timeout=60) as stream:
            for event in stream:
                if event.kind == "token":
                    print(event.json()["choices"][0]["text"], end="", flush=True)
        print()
    except EngineFault as f:  # str(f) names the leg, the engine, the kind and what the engine said
        sys.exit(f"{f.status} {f}")
    with urllib.request.urlopen(p["url"] + "/sim/stats") as r:
        print("producer blocks read:", json.load(r)["blocks_read"])


if __name__ == "__main__":
    main()
