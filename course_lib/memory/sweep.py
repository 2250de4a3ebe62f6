"""Predicted beside measured: one sweep over shapes, attention paths and checkpointing modes.

Every row is one real training step (``model(**batch).loss.backward()``), measured by
:func:`~course_lib.memory.meter.measure_step`, next to :func:`~course_lib.memory.predict.
activation_bytes` at the same shape. :func:`compare_shapes` sweeps attention paths (lesson 1),
:func:`compare_checkpointing` sweeps checkpointing modes (lesson 4); both are the same loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import torch

from .._checks import Checkpointing, checkpointing_mode, positive_int, seq_len_within
from ..batch import random_batch
from ..model import TinyGPT, TinyGPTConfig
from .meter import Device, measure_step, pick_device
from .predict import activation_bytes, attention_elements

Shape = tuple[int, int]  # (batch_size, seq_len)


def mode_label(checkpointing: Checkpointing | bool | None, checkpoint_every: int = 1) -> str:
    """How figures and tables name a checkpointing setting.

    Args:
        checkpointing: a mode (``"off"``, ``"blocks"``, ``"attention"``) or a bool (off/blocks).
        checkpoint_every: the stride of checkpointed blocks.

    Returns:
        The mode, with the stride when it is not 1 (``"blocks/2"``); ``"off"`` never has one.

    Raises:
        ValueError: an unknown checkpointing mode.
    """
    mode = checkpointing_mode(checkpointing)
    return mode if mode == "off" or checkpoint_every == 1 else f"{mode}/{checkpoint_every}"


@dataclass
class ShapeComparison:
    """One training step, predicted beside measured. Sizes in bytes.

    ``predicted_bytes``/``measured_bytes``: the peak above the weights (activations, gradients in
    flight, the weights' gradients); ``saved_bytes``: what the forward pass kept for backward
    (measured); ``method``: ``"CPU: counted bytes"`` or ``"GPU: allocator peak"``.
    """

    attn_impl: str
    checkpointing: Checkpointing
    checkpoint_every: int
    n_layers: int
    n_heads: int
    batch_size: int
    seq_len: int
    predicted_bytes: int
    measured_bytes: int
    predicted_saved_bytes: int
    saved_bytes: int
    peak_at: str
    method: str
    counted_bytes: int = 0  # the exact count, on a GPU too (beside the allocator's peak)

    @property
    def tokens(self) -> int:
        return self.batch_size * self.seq_len

    @property
    def attention_elements(self) -> int:
        """Score elements per layer at this shape: ``batch_size * n_heads * seq_len**2``."""
        return attention_elements(self.batch_size, self.n_heads, self.seq_len)

    @property
    def ratio(self) -> float:
        """Predicted / measured peak (1.0 = the model is exact)."""
        return self.predicted_bytes / self.measured_bytes

    @property
    def label(self) -> str:
        return mode_label(self.checkpointing, self.checkpoint_every)


def _check_shapes(config: TinyGPTConfig, shapes: Iterable[Shape]) -> list[Shape]:
    checked = [
        (positive_int("batch_size", b), seq_len_within(t, config.max_seq_len)) for b, t in shapes
    ]
    if not checked:
        raise ValueError("the sweep needs at least one (batch_size, seq_len) shape")
    return checked


def sweep(
    configs: Sequence[TinyGPTConfig],
    shapes: Iterable[Shape],
    device: Device = None,
    seed: int = 0,
    progress: bool = False,
    desc: str = "",
    dtype: torch.dtype = torch.float32,
) -> list[ShapeComparison]:
    """Measure one step of every config at every shape beside its prediction.

    Each config gets its own TinyGPT built from ``seed`` (so all share the same weights), in
    ``dtype``. Rows come config by config, shape by shape.

    Args:
        configs: the models to measure (each built once).
        shapes: ``(batch_size, seq_len)`` pairs in rows and tokens, checked against the first
            config's ``max_seq_len``.
        device: where the steps run (default: CUDA when available, else the CPU).
        seed: the weights' and the batches' seed.
        progress: show a tqdm bar over the steps.
        desc: the progress bar's label.
        dtype: the models' dtype.

    Returns:
        One :class:`ShapeComparison` per config and shape (``len(configs) * len(shapes)`` rows).

    Raises:
        ValueError: no shape, or a shape that is not positive or longer than ``max_seq_len``.
    """
    shapes = _check_shapes(configs[0], shapes)
    dev = pick_device(device)
    jobs: Iterable[tuple[TinyGPTConfig, int, int]] = [
        (cfg, b, t) for cfg in configs for b, t in shapes
    ]
    if progress:
        from tqdm.auto import tqdm

        jobs = tqdm(jobs, desc=desc or "measuring steps")
    models: dict[TinyGPTConfig, TinyGPT] = {}
    rows = []
    for cfg, b, t in jobs:
        if cfg not in models:
            torch.manual_seed(seed)
            models[cfg] = TinyGPT(cfg).to(dev, dtype)
        batch = random_batch(cfg.vocab_size, b, t, seed, dev)
        report = measure_step(models[cfg], batch, device=dev)
        predicted = activation_bytes(cfg, b, t, dtype)
        rows.append(
            ShapeComparison(
                attn_impl=cfg.attn_impl,
                checkpointing=cfg.checkpointing,
                checkpoint_every=cfg.checkpoint_every,
                n_layers=cfg.n_layers,
                n_heads=cfg.n_heads,
                batch_size=b,
                seq_len=t,
                predicted_bytes=predicted.total,
                measured_bytes=report.peak_bytes,
                predicted_saved_bytes=predicted.saved_total,
                saved_bytes=report.saved_bytes,
                peak_at=predicted.peak_at,
                method=report.method,
                counted_bytes=report.counted_peak_bytes,
            )
        )
    return rows


def compare_shapes(
    config: TinyGPTConfig,
    shapes: Iterable[Shape],
    attn_impls: Sequence[str] = ("eager", "sdpa"),
    device: Device = None,
    seed: int = 0,
    progress: bool = False,
    dtype: torch.dtype = torch.float32,
) -> list[ShapeComparison]:
    """Measure a training step at each ``(batch_size, seq_len)`` beside the prediction, for each
    attention path (same weights for every path).

    Args:
        config: the model; its ``attn_impl`` is replaced by each of ``attn_impls``.
        shapes: ``(batch_size, seq_len)`` pairs in rows and tokens.
        attn_impls: the attention paths to compare.
        device: where the steps run (default: CUDA when available, else the CPU).
        seed: the weights' and the batches' seed.
        progress: show a tqdm bar over the steps.
        dtype: the model's dtype.

    Returns:
        One :class:`ShapeComparison` per path and shape, path by path.

    Raises:
        ValueError: see :func:`sweep`; an unknown attention path.
    """
    configs = [replace(config, attn_impl=impl) for impl in attn_impls]
    return sweep(configs, shapes, device, seed, progress, "measuring shapes", dtype)


def compare_checkpointing(
    config: TinyGPTConfig,
    shapes: Iterable[Shape],
    modes: Sequence[Checkpointing | bool] = ("off", "blocks"),
    device: Device = None,
    seed: int = 0,
    progress: bool = False,
    dtype: torch.dtype = torch.float32,
) -> list[ShapeComparison]:
    """Measure one training step at every shape for every checkpointing mode, beside the
    prediction (same weights for every mode; ``config.checkpoint_every`` applies).

    Args:
        config: the model; its ``checkpointing`` is replaced by each of ``modes``.
        shapes: ``(batch_size, seq_len)`` pairs in rows and tokens.
        modes: the checkpointing modes to compare (bools mean off/blocks).
        device: where the steps run (default: CUDA when available, else the CPU).
        seed: the weights' and the batches' seed.
        progress: show a tqdm bar over the steps.
        dtype: the model's dtype.

    Returns:
        One :class:`ShapeComparison` per mode and shape, mode by mode.

    Raises:
        ValueError: see :func:`sweep`; an unknown checkpointing mode.
    """
    configs = [replace(config, checkpointing=checkpointing_mode(m)) for m in modes]
    return sweep(configs, shapes, device, seed, progress, "measuring peaks", dtype)
