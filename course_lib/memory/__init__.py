"""Memory of one training step: measured (``meter``), predicted (``predict``), compared
(``sweep``), and the measured "does it fit" probe (``probe``).

The names below are the package's public API; each lives in the module it is imported from
(``predict_hf_step``, for Hugging Face models, in the torch-free :mod:`course_lib.hf`).
"""

from ..hf.predict import HFStepBreakdown, predict_hf_step
from ..units import format_bytes
from .meter import (
    CPU_METHOD,
    GPU_METHOD,
    LiveBytesTracker,
    MemoryReport,
    measure,
    measure_step,
    measurement_method,
    pick_device,
    training_step,
)
from .predict import ActivationBreakdown, activation_bytes, attention_elements, parameter_count
from .probe import MemoryProbe
from .sweep import ShapeComparison, compare_checkpointing, compare_shapes, mode_label

__all__ = [
    "ActivationBreakdown",
    "CPU_METHOD",
    "GPU_METHOD",
    "HFStepBreakdown",
    "LiveBytesTracker",
    "MemoryProbe",
    "MemoryReport",
    "ShapeComparison",
    "activation_bytes",
    "attention_elements",
    "compare_checkpointing",
    "compare_shapes",
    "format_bytes",
    "measure",
    "measure_step",
    "measurement_method",
    "mode_label",
    "parameter_count",
    "pick_device",
    "predict_hf_step",
    "training_step",
]
