"""Drive a vLLM prefill/decode pair with the contract the Narwhal router enforces.

Internal API: it may change between releases. Entry points:
``narwhal.engines.client.EngineClient`` and ``narwhal.engines.connector.PrefillResult``.
"""
