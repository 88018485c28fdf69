"""What the engine adapters share besides the rules: their environment knobs (``knobs``; a
host tier's prices and model, ``tier``) and the counters they keep of what they did
(``metrics``), exported to Prometheus as ``prometheus`` defines them, and the calls they
record when asked (``record``).  The rules themselves are the library's classes
(``ttlpolicy.ProgramLifecycle`` and the parts it joins)."""

from .knobs import EngineKnobs, env_bool, env_float, record_from_env
from .metrics import AdapterMetrics
from .prometheus import METRICS, MISS_CAUSES, MetricSpec, PrometheusExporter, exporter_or_none
from .record import Recorder, RecordSettings
from .tier import OffloadSettings

__all__ = [
    "METRICS",
    "MISS_CAUSES",
    "AdapterMetrics",
    "EngineKnobs",
    "MetricSpec",
    "OffloadSettings",
    "PrometheusExporter",
    "RecordSettings",
    "Recorder",
    "env_bool",
    "env_float",
    "exporter_or_none",
    "record_from_env",
]
