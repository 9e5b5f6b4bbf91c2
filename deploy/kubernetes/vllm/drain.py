#!/usr/bin/env python3
"""The preStop hook of a vLLM pod behind Narwhal: hold SIGTERM back until the engine is idle.

A terminating pod leaves Narwhal's fleet at once (its Kubernetes source drops a pod being
deleted), so it gets no new request; what it still serves are the streams already open. vLLM
cuts them when SIGTERM stops it, so this hook runs first and returns only when the engine has
nothing running or waiting (vllm:num_requests_running and vllm:num_requests_waiting on its
/metrics, summed over every engine and model label), or when DRAIN_MAX_S has passed. Kubernetes
counts the hook against terminationGracePeriodSeconds: keep that above DRAIN_MAX_S plus vLLM's
own shutdown.

Settings (environment):
  DRAIN_METRICS_URL  the engine's metrics (default http://127.0.0.1:8000/metrics)
  DRAIN_MIN_S        wait at least this long first, so every router has heard of the
                     deletion before idleness is trusted (default 5)
  DRAIN_MAX_S        give up waiting after this long (default 600)
  DRAIN_HOLD_S       once idle, wait this much longer: a producer's finished prefills still
                     hold KV blocks its consumers have yet to pull (default 0)
An engine that does not answer is taken as gone: the hook returns.
"""
import os
import sys
import time
import urllib.request

BUSY = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def in_flight(url):
    """The requests the engine runs or queues, or None when it does not answer."""
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            text = resp.read().decode("utf-8", "replace")
    except OSError:
        return None
    total = 0.0
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in BUSY:
            total += float(line.rsplit(" ", 1)[1])
    return total


def main():
    url = os.environ.get("DRAIN_METRICS_URL", "http://127.0.0.1:8000/metrics")
    min_s = float(os.environ.get("DRAIN_MIN_S", "5"))
    max_s = float(os.environ.get("DRAIN_MAX_S", "600"))
    hold_s = float(os.environ.get("DRAIN_HOLD_S", "0"))
    start = time.monotonic()
    time.sleep(min_s)
    while True:
        n = in_flight(url)
        waited = time.monotonic() - start
        if n is None:
            print(f"drain: the engine does not answer after {waited:.1f}s; stopping", flush=True)
            return 0
        if n == 0:
            print(f"drain: idle after {waited:.1f}s; holding {hold_s}s", flush=True)
            time.sleep(hold_s)
            return 0
        if waited >= max_s:
            print(f"drain: {n:.0f} requests still in flight after {waited:.1f}s; stopping anyway", flush=True)
            return 0
        time.sleep(0.5)


if __name__ == "__main__":
    sys.exit(main())
