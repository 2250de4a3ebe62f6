"""Predicted beside measured: one sweep over shapes, attention paths and checkpointing modes.

Every row is one real training step (``model(**batch).loss.backward()``), measured by
:func:`~course_lib.memory.meter.measure_step`, next to :func:`~course_lib.memory.predict.
activation_bytes` at the same shape. :func:`compare_shapes` sweeps attention paths (lesson 1),
:func:`compare_checkpointing` sweeps checkpointing modes (lesson 4); both are the same loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .._checks import checkpointing_mode, positive_int
from ..model import TinyGPT, TinyGPTConfig
from .meter import measure_step, pick_device
from .predict import activation_bytes, attention_elements


def mode_label(checkpointing, every: int = 1) -> str:
    """``"none"``/``False`` -> ``'plain'``, ``True``/``"blocks"`` -> ``'blocks'``; ``every`` > 1
    adds the stride (``'blocks/2'``)."""
    mode = checkpointing_mode(checkpointing)
    if mode == "none":
        return "plain"
    return mode if every == 1 else f"{mode}/{every}"


@dataclass
class ShapeComparison:
    """One training step, predicted beside measured. Sizes in bytes.

    ``predicted_bytes``/``measured_bytes``: the peak above the weights (activations, gradients in
    flight, the weights' gradients); ``saved_bytes``: what the forward pass kept for backward
    (measured); ``method``: ``"CPU: counted bytes"`` or ``"GPU: allocator peak"``.
    """

    attn_impl: str
    checkpointing: str
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


# The checkpointing sweep returns the same rows; the name says what a lesson-4 reader expects.
CheckpointingRow = ShapeComparison


def random_batch(config: TinyGPTConfig, batch_size: int, seq_len: int, seed: int, device) -> dict:
    """Random token ids, every token a label; the same ids for the same shape and seed."""
    gen = torch.Generator().manual_seed(seed + batch_size * 100003 + seq_len)
    ids = torch.randint(0, config.vocab_size, (batch_size, seq_len), generator=gen)  # (B, T)
    ids = ids.to(device)
    return {"input_ids": ids, "labels": ids}


def _check_shapes(config: TinyGPTConfig, shapes) -> list[tuple[int, int]]:
    shapes = [(b, t) for b, t in shapes]
    if not shapes:
        raise ValueError("the sweep needs at least one (batch_size, seq_len) shape")
    for b, t in shapes:
        positive_int("batch_size", b)
        positive_int("seq_len", t)
        if t > config.max_seq_len:
            raise ValueError(f"seq_len={t} is longer than max_seq_len={config.max_seq_len}")
    return shapes


def sweep(
    configs: list[TinyGPTConfig],
    shapes,
    device=None,
    seed: int = 0,
    progress: bool = False,
    desc: str = "",
    dtype: torch.dtype = torch.float32,
) -> list[ShapeComparison]:
    """Measure one step of every config at every shape beside its prediction.

    Each config gets its own TinyGPT built from ``seed`` (so all share the same weights), in
    ``dtype``. Rows come config by config, shape by shape.
    """
    shapes = _check_shapes(configs[0], shapes)
    dev = pick_device(device)
    jobs = [(cfg, b, t) for cfg in configs for b, t in shapes]
    if progress:
        from tqdm.auto import tqdm

        jobs = tqdm(jobs, desc=desc or "measuring steps")
    models: dict[TinyGPTConfig, TinyGPT] = {}
    rows = []
    for cfg, b, t in jobs:
        if cfg not in models:
            torch.manual_seed(seed)
            models[cfg] = TinyGPT(cfg).to(dev, dtype)
        report = measure_step(models[cfg], random_batch(cfg, b, t, seed, dev), device=dev)
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
    shapes,
    attn_impls=("eager", "sdpa"),
    device=None,
    seed: int = 0,
    progress: bool = False,
    dtype: torch.dtype = torch.float32,
) -> list[ShapeComparison]:
    """Measure a training step at each ``(batch_size, seq_len)`` beside the prediction, for each
    attention path (same weights for every path)."""
    configs = [replace(config, attn_impl=impl) for impl in attn_impls]
    return sweep(configs, shapes, device, seed, progress, "measuring shapes", dtype)


def compare_checkpointing(
    config: TinyGPTConfig,
    shapes,
    modes=("none", "blocks"),
    device=None,
    seed: int = 0,
    progress: bool = False,
    dtype: torch.dtype = torch.float32,
) -> list[ShapeComparison]:
    """Measure one training step at every shape for every checkpointing mode, beside the
    prediction (same weights for every mode; ``config.checkpoint_every`` applies)."""
    configs = [replace(config, checkpointing=checkpointing_mode(m)) for m in modes]
    return sweep(configs, shapes, device, seed, progress, "measuring peaks", dtype)
