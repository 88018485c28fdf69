"""What the engine adapters share besides the rules: their environment knobs (``knobs``; a
host tier's prices and model, ``tier``) and the counters they keep of what they did
(``metrics``).  The rules themselves are the library's classes (``ttlpolicy.ProgramLifecycle``
and the parts it joins)."""

from .knobs import EngineKnobs, env_float
from .metrics import AdapterMetrics
from .tier import OffloadSettings

__all__ = ["AdapterMetrics", "EngineKnobs", "OffloadSettings", "env_float"]
