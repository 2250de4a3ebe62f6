"""Lesson 1's experiments: splits of a token budget, every ``(batch_size, seq_len)`` with
``batch_size * seq_len`` equal to the same ``token_budget``.

Every split pushes the same tokens through the linear layers, so what they keep for backward
differs only where the shape enters on its own. Per layer, at a budget of ``N`` tokens, ``C =
d_model``, ``M = d_mlp``, ``H`` heads and ``T = seq_len``::

    linear values = N * (8 C + 2 M + 4)        the same for every split
    score values  = (N / T) * H * T**2 = N H T  eager attention: grows with seq_len

:func:`values_per_layer` tabulates both over ``seq_len``; :func:`budget_split` predicts (and
measures) one split for the two attention paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from .._checks import positive_int
from ..memory import (
    ActivationBreakdown,
    ShapeComparison,
    activation_bytes,
    attention_elements,
    compare_shapes,
)
from ..memory.meter import Device
from ..model import TinyGPTConfig


def _divisor(token_budget: int, seq_len: int) -> int:
    """``token_budget // seq_len``, or a ``ValueError`` when ``seq_len`` does not divide it."""
    positive_int("token_budget", token_budget)
    positive_int("seq_len", seq_len)
    if token_budget % seq_len:
        raise ValueError(
            f"seq_len={seq_len} does not divide token_budget={token_budget}: every split must "
            "hold exactly the budget's tokens; pick a divisor"
        )
    return token_budget // seq_len


def split_seq_lens(token_budget: int, max_seq_len: int, shortest: int = 16) -> list[int]:
    """The powers of two from ``shortest`` up to ``min(token_budget, max_seq_len)`` that divide
    ``token_budget``: the sequence lengths of lesson 1's slider.

    Args:
        token_budget: tokens per step every split keeps.
        max_seq_len: the model's longest row.
        shortest: the shortest sequence length offered.

    Returns:
        Ascending powers of two ``T`` with ``token_budget % T == 0`` (``split_seq_lens(16384,
        1024) == [16, 32, ..., 1024]``).

    Raises:
        ValueError: a size that is not a positive int, or no such power of two.
    """
    positive_int("token_budget", token_budget)
    positive_int("max_seq_len", max_seq_len)
    positive_int("shortest", shortest)
    top = min(token_budget, max_seq_len)
    lens = []
    t = 1
    while t <= top:
        if t >= shortest and token_budget % t == 0:
            lens.append(t)
        t *= 2
    if not lens:
        raise ValueError(
            f"no power of two from {shortest} to {top} divides token_budget={token_budget} "
            f"within max_seq_len={max_seq_len}; use a budget that is a multiple of {shortest}"
        )
    return lens


@dataclass
class ValuesPerLayer:
    """Values one eager layer keeps for backward at a fixed token budget, per split.

    ``linear[i]`` and ``scores[i]`` belong to ``seq_lens[i]`` (batch ``token_budget //
    seq_lens[i]``); values, not bytes (multiply by the bytes per element).
    """

    token_budget: int
    n_heads: int
    seq_lens: list[int]
    linear: list[int]
    scores: list[int]


def values_per_layer(
    *, n_heads: int, d_model: int, d_mlp: int, token_budget: int, seq_lens: Sequence[int]
) -> ValuesPerLayer:
    """``token_budget * (8 C + 2 M + 4)`` linear values and ``B * H * T**2`` score values per
    layer for every ``T`` in ``seq_lens`` (``B = token_budget // T``; see the module docstring).

    Args:
        n_heads: attention heads ``H``.
        d_model: channels ``C``.
        d_mlp: MLP hidden width ``M``.
        token_budget: tokens per step ``N``.
        seq_lens: the splits' sequence lengths, each dividing ``N``.

    Returns:
        :class:`ValuesPerLayer`: per ``T``, the linear count (the same for every ``T``) and the
        score count ``N H T`` (values, not bytes).

    Raises:
        ValueError: a size that is not a positive int, no ``seq_len``, or one that does not
            divide ``token_budget``.
    """
    for name, value in (("n_heads", n_heads), ("d_model", d_model), ("d_mlp", d_mlp)):
        positive_int(name, value)
    seq_lens = list(seq_lens)
    if not seq_lens:
        raise ValueError("values_per_layer needs at least one seq_len")
    batches = [_divisor(token_budget, t) for t in seq_lens]
    per_token = 8 * d_model + 2 * d_mlp + 4
    return ValuesPerLayer(
        token_budget=token_budget,
        n_heads=n_heads,
        seq_lens=seq_lens,
        linear=[token_budget * per_token for _ in seq_lens],
        scores=[b * n_heads * t * t for b, t in zip(batches, seq_lens)],
    )


@dataclass
class BudgetSplit:
    """One split of a token budget, predicted (and measured) for each attention path.

    ``breakdowns[i]`` is :func:`~course_lib.memory.activation_bytes` for path
    ``breakdowns[i].attn_impl``; ``measured[i]``, when measured, the real step at that path
    (:func:`~course_lib.memory.compare_shapes`); ``method`` says how it was measured.
    """

    token_budget: int
    batch_size: int
    seq_len: int
    score_elements: int  # batch_size * n_heads * seq_len**2, per layer
    breakdowns: list[ActivationBreakdown]
    measured: list[ShapeComparison] = field(default_factory=list)

    @property
    def method(self) -> str:
        return self.measured[0].method if self.measured else "predicted only"


def budget_split(
    config: TinyGPTConfig,
    token_budget: int,
    seq_len: int,
    *,
    attn_impls: Sequence[str] = ("eager", "sdpa"),
    measure: bool = True,
    device: Device = None,
    seed: int = 0,
) -> BudgetSplit:
    """Predict one step at ``(token_budget // seq_len) x seq_len`` for every attention path and,
    with ``measure``, run it (same weights for every path, from ``seed``).

    Args:
        config: the model; its ``attn_impl`` is replaced by each path.
        token_budget: tokens per step.
        seq_len: tokens per row; must divide ``token_budget``.
        attn_impls: the attention paths to predict (and measure).
        measure: also run one real step per path (seconds on a CPU).
        device: where the measured steps run (default: CUDA when available, else the CPU).
        seed: the weights' and the batch's seed.

    Returns:
        :class:`BudgetSplit`: the shape, score elements per layer, one prediction per path and,
        with ``measure``, one measured row per path.

    Raises:
        ValueError: ``seq_len`` does not divide ``token_budget``, or no attention path.
    """
    batch_size = _divisor(token_budget, seq_len)
    attn_impls = list(attn_impls)
    if not attn_impls:
        raise ValueError("budget_split needs at least one attention path, e.g. ('eager', 'sdpa')")
    breakdowns = [
        activation_bytes(replace(config, attn_impl=impl), batch_size, seq_len)
        for impl in attn_impls
    ]
    measured: list[ShapeComparison] = []
    if measure:
        measured = compare_shapes(
            config, [(batch_size, seq_len)], attn_impls=attn_impls, device=device, seed=seed
        )
    return BudgetSplit(
        token_budget=token_budget,
        batch_size=batch_size,
        seq_len=seq_len,
        score_elements=attention_elements(batch_size, config.n_heads, seq_len),
        breakdowns=breakdowns,
        measured=measured,
    )
