"""Memory over one training step, op by op: the worst moment of a step seen, and named.

:func:`record_step` runs one training step (``model(**batch).loss.backward()``) under
:class:`TimelineTracker`, the meter's :class:`~course_lib.memory.meter.LiveBytesTracker` that
also writes down, after every aten op, the live tensor bytes the step has allocated so far
("CPU: counted bytes", exact, on any device), which phase the op ran in and, in the backward
pass, which autograd node ran it. The largest value is the step's peak, the same number
:func:`~course_lib.memory.meter.measure_step` counts, and the op where it happened is the worst
moment the lessons reason about.

On a GPU, :func:`allocator_step` reads the same step from the CUDA caching allocator's own
history (``torch.cuda.memory._record_memory_history`` and ``_snapshot``): every block the
allocator handed out or took back, with the stack that asked for it ("GPU: allocator history");
:func:`timeline_from_trace` turns that trace into the same :class:`StepTimeline`.

Phases: ``forward``; ``backward``; ``recompute``, a checkpointed block's forward run again
inside the backward pass (autograd is running a node, and grad mode is on again).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from .._checks import positive_int
from ..batch import random_batch
from ..model import TinyGPT, TinyGPTConfig
from ..units import format_bytes
from .meter import CPU_METHOD, Device, LiveBytesTracker, pick_device, training_step

ALLOCATOR_METHOD = "GPU: allocator history"  # torch.cuda.memory._record_memory_history
PHASES = ("forward", "backward", "recompute")


@dataclass(frozen=True)
class OpEvent:
    """One moment of a step: after op (or allocator event) ``index``, ``live_bytes`` were live.

    ``op``: the aten op (``"aten.bmm"``) or, from the allocator, what asked for the block;
    ``phase``: one of :data:`PHASES`; ``node``: the autograd node running it in the backward
    pass (``"SoftmaxBackward0"``), ``""`` in the forward.
    """

    index: int
    op: str
    phase: str
    node: str
    live_bytes: int


@dataclass
class StepTimeline:
    """Live bytes over one training step, one event per op. Bytes above the step's start."""

    label: str
    method: str
    events: list[OpEvent] = field(default_factory=list)

    @property
    def peak(self) -> OpEvent:
        """The first event at the step's largest live bytes: the worst moment.

        Returns:
            The event; its ``live_bytes`` is the step's peak.

        Raises:
            ValueError: the timeline has no events.
        """
        if not self.events:
            raise ValueError(f"timeline {self.label!r} has no events: nothing ran while recording")
        return max(self.events, key=lambda e: (e.live_bytes, -e.index))

    @property
    def peak_bytes(self) -> int:
        """The step's peak above its start, in bytes."""
        return self.peak.live_bytes

    def first(self, phase: str) -> int | None:
        """The index of the first event in ``phase``, or ``None`` when none ran.

        Args:
            phase: one of :data:`PHASES`.

        Returns:
            An event index, or ``None``.
        """
        return next((e.index for e in self.events if e.phase == phase), None)

    def describe(self) -> str:
        """The worst moment in words.

        Returns:
            ``"eager: peak 141 MiB in the backward pass, aten._softmax_backward_data in
            SoftmaxBackward0 (CPU: counted bytes)"``.
        """
        p = self.peak
        where = f"{p.op} in {p.node}" if p.node else p.op
        pass_ = {"recompute": "a recomputation"}.get(p.phase, f"the {p.phase} pass")
        return (
            f"{self.label}: peak {format_bytes(p.live_bytes)} in {pass_}, {where} ({self.method})"
        )


def _op_name(func: Any) -> str:
    name = str(getattr(func, "overloadpacket", func))  # aten.bmm, not aten.bmm.default
    return name if name.startswith("aten.") else f"aten.{name}"


class TimelineTracker(LiveBytesTracker):
    """The meter's tracker, also writing down the live bytes after every op (``events``)."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[OpEvent] = []

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        out = super().__torch_dispatch__(func, types, args, kwargs)
        node = torch._C._current_autograd_node()
        if node is None:
            phase, name = "forward", ""
        else:  # autograd is running a node: the backward pass, or a recomputation inside it
            phase, name = ("recompute" if torch.is_grad_enabled() else "backward"), node.name()
        self.events.append(OpEvent(len(self.events), _op_name(func), phase, name, self.live_bytes))
        return out


def record_step(
    model: torch.nn.Module, batch: dict, label: str = "", device: Device = None
) -> StepTimeline:
    """One training step with its live bytes written down after every op (counted bytes).

    Args:
        model: any model whose output has ``.loss``.
        batch: its keyword arguments, already on the model's device.
        label: the timeline's name in figures (``"eager"``, ``"checkpointed"``).
        device: where the step runs (for the synchronisation on CUDA; default: CUDA when
            available, else the CPU).

    Returns:
        :class:`StepTimeline` measured as ``"CPU: counted bytes"`` (an exact count on any
        device); its peak equals :func:`~course_lib.memory.meter.measure_step`'s counted peak.
    """
    dev = pick_device(device)
    model.zero_grad(set_to_none=True)
    try:
        with TimelineTracker() as tracker:
            training_step(model, batch)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
    finally:
        model.zero_grad(set_to_none=True)
    return StepTimeline(label, CPU_METHOD, tracker.events)


# --- the CUDA allocator's history -------------------------------------------------------------

_NODE = re.compile(r"(\w+Backward\d*)")
_MARK_BYTES = 512 * 7919  # an allocation no step makes: where the step's trace begins


def _frame_words(frames: Sequence[Mapping[str, Any]]) -> tuple[str, str, str]:
    """(what asked, phase, node) from an allocation's stack, innermost frame first."""
    names = [str(f.get("name", "")) for f in frames]
    node = next((m.group(1) for n in names if (m := _NODE.search(n))), "")
    backward = bool(node) or any("autograd::engine" in n or "backward" in n for n in names)
    recompute = backward and any("checkpoint" in str(f.get("filename", "")) for f in frames)
    phase = "recompute" if recompute else ("backward" if backward else "forward")
    ours = next((f for f in frames if str(f.get("filename", "")).endswith(".py")
                 and "/torch/" not in str(f.get("filename", ""))), None)  # fmt: skip
    if ours is not None:
        where = str(ours.get("filename")).rsplit("/", 1)[-1]
        what = f"{ours.get('name')} ({where}:{ours.get('line')})"
    else:
        what = names[0] if names else "?"
    return what, phase, node


def timeline_from_trace(trace: Sequence[Mapping[str, Any]], label: str = "") -> StepTimeline:
    """A :class:`StepTimeline` from one device's allocator trace (``_snapshot()["device_traces"]``).

    Live bytes rise at every ``alloc`` and fall at every ``free_completed`` (as PyTorch's own
    memory viewer counts them); one event per allocation or completed free. When the trace holds
    :func:`allocator_step`'s marker (an allocation of an odd size made just before the step),
    only what follows the marker's free is the step.

    Args:
        trace: the trace entries: dicts with ``action``, ``size``, ``frames`` (``[{"name",
            "filename", "line"}]``, innermost first).
        label: the timeline's name.

    Returns:
        :class:`StepTimeline` measured as ``"GPU: allocator history"``.
    """
    entries = list(trace)
    ends = [i for i, e in enumerate(entries)
            if e.get("action") == "free_completed" and e.get("size") == _MARK_BYTES]  # fmt: skip
    mark = ends[-1] if ends else None
    if mark is not None:
        entries = entries[mark + 1 :]
    live, events = 0, list[OpEvent]()
    for e in entries:
        action = e.get("action")
        if action not in ("alloc", "free_completed"):
            continue
        live += int(e.get("size", 0)) * (1 if action == "alloc" else -1)
        what, phase, node = _frame_words(e.get("frames") or [])
        events.append(OpEvent(len(events), what, phase, node, live))
    return StepTimeline(label, ALLOCATOR_METHOD, events)


def allocator_step(model: torch.nn.Module, batch: dict, label: str = "") -> StepTimeline:
    """One training step read from the CUDA caching allocator's history.

    Args:
        model: a model on a CUDA device, whose output has ``.loss``.
        batch: its keyword arguments, on the same device.
        label: the timeline's name.

    Returns:
        :class:`StepTimeline` measured as ``"GPU: allocator history"``.

    Raises:
        RuntimeError: CUDA is not available (there is no allocator history on the CPU).
    """
    if not torch.cuda.is_available():
        raise RuntimeError("allocator_step needs CUDA: on the CPU use record_step (counted bytes)")
    memory = torch.cuda.memory
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    memory._record_memory_history(enabled=None)
    memory._record_memory_history(max_entries=200_000)
    try:
        marker = torch.empty(_MARK_BYTES, dtype=torch.uint8, device="cuda")
        del marker
        training_step(model, batch)
        torch.cuda.synchronize()
        snapshot = memory._snapshot()
    finally:
        memory._record_memory_history(enabled=None)
        model.zero_grad(set_to_none=True)
    device = torch.cuda.current_device()
    return timeline_from_trace(snapshot["device_traces"][device], label)


def step_timelines(
    config: TinyGPTConfig,
    batch_size: int,
    seq_len: int,
    variants: Mapping[str, Mapping[str, Any]],
    device: Device = None,
    seed: int = 0,
) -> list[StepTimeline]:
    """One step of each variant of ``config`` on the same batch and weights, op by op.

    Args:
        config: the model.
        batch_size: rows of the random full-row batch.
        seq_len: tokens per row.
        variants: ``{label: fields to replace in config}``, e.g. ``{"plain": {},
            "checkpointed": {"checkpointing": "blocks"}}`` or ``{"eager": {"attn_impl":
            "eager"}, "sdpa": {"attn_impl": "sdpa"}}``.
        device: where the steps run (default: CUDA when available, else the CPU).
        seed: the weights' and the batch's seed.

    Returns:
        One counted :class:`StepTimeline` per variant; on CUDA also one from the allocator's
        history per variant, after them (labelled the same, measured as
        ``"GPU: allocator history"``).

    Raises:
        ValueError: no variant, a size that is not positive, or a field ``TinyGPTConfig`` does
            not have (its own message).
    """
    positive_int("batch_size", batch_size)
    positive_int("seq_len", seq_len)
    if not variants:
        raise ValueError("step_timelines needs at least one variant, e.g. {'plain': {}}")
    dev = pick_device(device)
    counted, allocated = [], []
    for label, fields in variants.items():
        cfg = replace(config, **fields)
        torch.manual_seed(seed)
        model = TinyGPT(cfg).to(dev)
        batch = random_batch(cfg.vocab_size, batch_size, seq_len, seed, dev)
        counted.append(record_step(model, batch, label, dev))
        if dev.type == "cuda":
            allocated.append(allocator_step(model, batch, label))
    return counted + allocated
