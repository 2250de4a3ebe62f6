"""The memory meter: the peak bytes of one function call, measured.

:func:`measure` runs a function (usually forward + backward) and reports the peak of live tensor
bytes it allocated. On a CUDA device it reads the caching allocator's peak ("GPU: allocator
peak"); everywhere it can count exactly, by intercepting every tensor allocation with a
``TorchDispatchMode`` and freeing it when its storage dies ("CPU: counted bytes"). Process RSS is
never read: on the CPU it is noise. The meter wraps a step and never changes it.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ..units import format_bytes


def _storage_key(t: torch.Tensor) -> int:
    # The address of the C++ StorageImpl: stable for the storage's life, and defined for fake
    # tensors too (which have no data pointer).
    return t.untyped_storage()._cdata


class LiveBytesTracker(TorchDispatchMode):
    """Counts the bytes of every tensor storage allocated while active, and frees them on death.

    A storage is counted once, when the op that allocated it returns; outputs that alias an input
    (views, in-place ops) allocate nothing and are skipped. A ``weakref.finalize`` on the storage
    subtracts its bytes when the last tensor using it dies, so ``live_bytes`` follows the true
    working set and ``peak_bytes`` is its maximum. Tensors that existed before the tracker started
    (parameters, the input batch) are not counted.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch wraps a mode's __torch_dispatch__ in a lazy `torch._dynamo.disable`, whose first
        # call imports dynamo (3-6 s per process here). The meter never runs under
        # torch.compile, so the wrapper buys nothing; without it the first measurement is instant.
        return False

    def __init__(self) -> None:
        super().__init__()
        self.live_bytes = 0
        self.peak_bytes = 0
        self._live: dict[int, int] = {}

    def _release(self, key: int, nbytes: int) -> None:
        if self._live.get(key) == nbytes:
            del self._live[key]
            self.live_bytes -= nbytes

    def is_tracked(self, t: torch.Tensor) -> bool:
        """Whether ``t``'s storage was allocated (and is still alive) under this tracker.

        Args:
            t: any tensor.

        Returns:
            True for a tensor made inside the tracked region whose storage is still counted;
            False for parameters, inputs and anything made before the tracker started.
        """
        return _storage_key(t) in self._live

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {
            _storage_key(a) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in inputs or key in self._live:
                continue
            nbytes = storage.nbytes()
            self._live[key] = nbytes
            self.live_bytes += nbytes
            if self.live_bytes > self.peak_bytes:
                self.peak_bytes = self.live_bytes
            weakref.finalize(storage, self._release, key, nbytes)
        return out


@dataclass
class MemoryReport:
    """What :func:`measure` saw. All sizes in bytes.

    ``peak_bytes``: the peak of memory allocated by ``fn`` above what was live when it started.
    ``method``: ``"GPU: allocator peak"`` or ``"CPU: counted bytes"``.
    ``counted_peak_bytes``: the exact count (on a GPU too, for comparison with the allocator).
    ``saved_bytes``: bytes autograd saved for backward (unique storages allocated inside ``fn``).
    ``retained_bytes``: bytes still live when ``fn`` returned (e.g. the parameters' gradients).
    """

    peak_bytes: int
    method: str
    device: str
    counted_peak_bytes: int
    saved_bytes: int
    retained_bytes: int
    seconds: float
    result: object = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return f"{self.method}: {format_bytes(self.peak_bytes)}"


Device = str | torch.device | None  # where a step runs; None: CUDA when available, else the CPU
GPU_METHOD = "GPU: allocator peak"  # torch.cuda.max_memory_allocated above the start
CPU_METHOD = "CPU: counted bytes"  # every tensor allocation counted by LiveBytesTracker


def pick_device(device: Device = None) -> torch.device:
    """``device`` as a ``torch.device``; ``None`` picks CUDA when it is available, else the CPU.

    Args:
        device: a device or its name (``"cpu"``, ``"cuda:1"``), or ``None``.

    Returns:
        The ``torch.device`` a step will run on.

    Raises:
        RuntimeError: a string torch does not know as a device (torch's own message).
    """
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def measurement_method(device: Device = None) -> str:
    """How :func:`measure` measures on ``device`` (default: :func:`pick_device`'s choice).

    Args:
        device: a device or its name, or ``None``.

    Returns:
        ``"GPU: allocator peak"`` on CUDA, ``"CPU: counted bytes"`` everywhere else: the label to
        print beside a measured figure.
    """
    return GPU_METHOD if pick_device(device).type == "cuda" else CPU_METHOD


def measure(
    fn: Callable[[], object], device: Device = None, count_saved: bool = True
) -> MemoryReport:
    """Run ``fn()`` once and report its peak memory.

    On CUDA the reported peak is the caching allocator's ``max_memory_allocated`` above the
    starting point; on the CPU it is the exact count of live tensor bytes (there is no CPU
    allocator API to ask). The measurement does not change what it measures: ``fn`` runs once,
    with the same ops.

    Args:
        fn: the work to measure, called with no arguments (e.g. forward + backward).
        device: where ``fn`` runs (default: CUDA when available, else the CPU).
        count_saved: also count what autograd saves for backward (``saved_bytes``).

    Returns:
        :class:`MemoryReport`, ``peak_bytes`` in bytes, ``result`` what ``fn`` returned.

    Raises:
        TypeError: ``fn`` is not callable.
    """
    if not callable(fn):
        raise TypeError(f"measure needs a callable with no arguments, got {type(fn).__name__}")
    dev = pick_device(device)
    saved: dict[int, int] = {}
    tracker = LiveBytesTracker()

    def pack(t: torch.Tensor) -> torch.Tensor:
        if tracker.is_tracked(t):
            storage = t.untyped_storage()
            saved.setdefault(storage._cdata, storage.nbytes())
        return t

    hooks = (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        if count_saved
        else contextlib.nullcontext()
    )
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        start = torch.cuda.memory_allocated(dev)
    t0 = time.perf_counter()
    with tracker, hooks:
        result = fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev) - start
        method = GPU_METHOD
    else:
        peak = tracker.peak_bytes
        method = CPU_METHOD
    seconds = time.perf_counter() - t0
    return MemoryReport(
        peak_bytes=int(peak),
        method=method,
        device=str(dev),
        counted_peak_bytes=tracker.peak_bytes,
        saved_bytes=sum(saved.values()),
        retained_bytes=tracker.live_bytes,
        seconds=seconds,
        result=result,
    )


# One training step, measured


def training_step(model: torch.nn.Module, batch: dict) -> float:
    """One forward + backward, the way a training loop writes it.

    ``model(**batch).loss.backward()``: the output object (and its logits) is dropped before the
    backward pass, exactly as a training loop without extra references does, so nothing extra stays
    alive.

    Args:
        model: any model whose output has ``.loss``.
        batch: its keyword arguments.

    Returns:
        The loss as a Python float (detached: no graph is kept).
    """
    loss = model(**batch).loss
    loss.backward()
    return float(loss.detach())


def measure_step(model: torch.nn.Module, batch: dict, device: Device = None) -> MemoryReport:
    """:func:`measure` one :func:`training_step`, with gradients cleared before and after.

    Args:
        model: any model whose output has ``.loss`` (TinyGPT, a Hugging Face causal LM).
        batch: its keyword arguments (``model(**batch)``), already on ``device``.
        device: where the step runs (default: CUDA when available, else the CPU).

    Returns:
        :class:`MemoryReport` of the step; the gradients are cleared again afterwards.
    """
    model.zero_grad(set_to_none=True)  # so the gradients are allocated inside the step
    try:
        return measure(lambda: training_step(model, batch), device=device)
    finally:
        model.zero_grad(set_to_none=True)  # also after an out-of-memory error: free them
