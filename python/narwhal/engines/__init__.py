"""Drive a vLLM prefill/decode pair with the contract the Narwhal router enforces.

Internal API: it may change between releases. Everything a caller needs is importable from
here::

    from narwhal.engines import EngineClient, PrefillResult, EngineFault, EngineTimeoutError

The submodules (``client``, ``connector``, ``faults``, ``wire``) hold the same names and the
rest of the machinery.
"""

from .client import DecodeStream, EngineClient, StreamEvent
from .connector import PrefillResult, Rejection
from .faults import (EngineConnectionError, EngineError, EngineFault, EngineTimeoutError, FaultKind, HandoffError,
                     LegCancelled)
from .wire import BadRequest

__all__ = [
    "EngineClient", "DecodeStream", "StreamEvent", "PrefillResult", "Rejection",
    "EngineFault", "EngineTimeoutError", "EngineConnectionError", "EngineError", "HandoffError", "LegCancelled",
    "FaultKind", "BadRequest",
]
