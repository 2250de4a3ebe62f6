"""Counting tokens: per batch, and per optimiser step over a whole run.

"Sixteen examples per step" says little; what the optimiser sees is tokens. A batch has three
counts that differ: its slots (``B * T``, what is computed), its real tokens (not padding) and its
loss tokens (shifted labels that are not -100, what the gradient averages over).
:func:`batch_token_counts` counts one batch; :class:`TokensPerStepLogger` sums them per optimiser
step in any training loop and warns when a step has too few loss tokens.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from .batch import count_loss_tokens
from .distributed import all_reduce_sum, is_distributed

# A common rule of thumb for fine-tuning: below about 4,000 loss tokens per optimiser step the
# gradient is noisy; raise accumulation rather than the learning rate (lesson 3 measures why).
LOW_TOKENS_PER_STEP = 4_000


@dataclass
class MicroBatchTokens:
    """Token counts of one micro-batch: ``all_tokens`` (slots, ``B * T``), ``non_pad_tokens``
    (``attention_mask`` ones; every slot when there is no mask), ``loss_tokens`` (shifted labels
    that are not -100) and ``examples`` (rows, ``B``)."""

    all_tokens: int
    non_pad_tokens: int
    loss_tokens: int
    examples: int


def batch_token_counts(batch: dict) -> MicroBatchTokens:
    """Count the tokens of a batch dict with Hugging Face names (no forward pass).

    Args:
        batch: a batch dict: ``input_ids`` ``(B, T)``, optionally ``attention_mask`` and
            ``labels``.

    Returns:
        :class:`MicroBatchTokens`: slots ``B * T``, non-pad tokens, loss tokens
        (:func:`~course_lib.batch.count_loss_tokens`; 0 without labels) and rows ``B``.

    Raises:
        ValueError: the batch has no ``input_ids``.
    """
    if "input_ids" not in batch:
        raise ValueError(f"a batch needs 'input_ids'; got keys {sorted(batch)}")
    input_ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    labels = batch.get("labels")
    return MicroBatchTokens(
        all_tokens=int(input_ids.numel()),
        non_pad_tokens=int(mask.sum()) if mask is not None else int(input_ids.numel()),
        loss_tokens=count_loss_tokens(labels) if labels is not None else 0,
        examples=int(input_ids.shape[0]),
    )


@dataclass
class StepTokens:
    """Tokens of one optimiser step (summed over ranks when ``torch.distributed`` is on)."""

    step: int
    micro_batches: int
    examples: int  # the effective batch: rows per device x micro-batches x devices
    all_tokens: int
    non_pad_tokens: int
    loss_tokens: int
    n_devices: int
    low: bool  # loss_tokens below the logger's threshold


@dataclass
class TokensSummary:
    """Over the logged steps: loss tokens per step (mean, min), ``padding_fraction``
    (1 - non-pad / all tokens), mean effective batch (examples) and steps below the threshold."""

    steps: int
    mean_loss_tokens: float
    min_loss_tokens: int
    padding_fraction: float
    mean_effective_batch: float
    low_steps: int


@dataclass
class TokensPerStepLogger:
    """Counts tokens per optimiser step in any loop: ``log_micro_batch(batch)`` for every
    micro-batch, ``end_step()`` after ``optimizer.step()``. Steps with fewer than ``threshold``
    loss tokens are flagged (``StepTokens.low``) and warned about once: gradient noise tracks
    tokens, so raise accumulation rather than the learning rate.

    ``sync_ranks``: with ``torch.distributed`` initialised, ``end_step`` sums the counts over
    ranks (one ``all_reduce``; every rank must call it).
    """

    threshold: int = LOW_TOKENS_PER_STEP
    sync_ranks: bool = True
    history: list[StepTokens] = field(default_factory=list)
    _current: list[MicroBatchTokens] = field(default_factory=list, repr=False)
    _warned: bool = field(default=False, repr=False)

    def log_micro_batch(self, batch: dict) -> MicroBatchTokens:
        """Count one micro-batch of the current step (no forward pass).

        Args:
            batch: the micro-batch as the model receives it.

        Returns:
            Its :class:`MicroBatchTokens` (this rank only, not yet summed over ranks).
        """
        counts = batch_token_counts(batch)
        self._current.append(counts)
        return counts

    def end_step(self) -> StepTokens:
        """Close the current optimiser step: its :class:`StepTokens` (summed over ranks).

        Returns:
            :class:`StepTokens` of the step: the micro-batches' counts summed (and, with
            ``sync_ranks`` under ``torch.distributed``, over ranks); also appended to ``history``.

        Raises:
            ValueError: no micro-batch was logged since the last step.
        """
        if not self._current:
            raise ValueError(
                "end_step() with no micro-batch logged since the last step: call "
                "log_micro_batch(batch) for every micro-batch first"
            )
        names = ("examples", "all_tokens", "non_pad_tokens", "loss_tokens")
        totals = [sum(getattr(c, name) for c in self._current) for name in names]
        n_devices = 1
        if self.sync_ranks and is_distributed():
            totals = [int(v) for v in all_reduce_sum(totals, torch.int64)]
            n_devices = dist.get_world_size()
        examples, all_tokens, non_pad_tokens, loss_tokens = totals
        record = StepTokens(
            len(self.history), len(self._current), examples, all_tokens, non_pad_tokens,
            loss_tokens, n_devices=n_devices, low=loss_tokens < self.threshold,
        )  # fmt: skip
        self.history.append(record)
        self._current = []
        if record.low and not self._warned:
            self._warned = True
            warnings.warn(
                f"step {record.step}: {record.loss_tokens} loss tokens per optimiser "
                f"step (< {self.threshold}); gradients are noisy: raise "
                "gradient_accumulation_steps rather than the learning rate",
                stacklevel=2,
            )
        return record

    def table(self) -> str:
        """Every logged step: examples, row slots, real tokens and loss tokens.

        Returns:
            A text table, one line per logged step under a header line; counts in tokens, thousands
            separated.
        """
        lines = [f"{'step':>4} {'examples':>8} {'row slots':>9} {'real tokens':>11} "
                 f"{'loss tokens':>11}"]  # fmt: skip
        for s in self.history:
            lines.append(f"{s.step:>4} {s.examples:>8} {s.all_tokens:>9,} "
                         f"{s.non_pad_tokens:>11,} {s.loss_tokens:>11,}")  # fmt: skip
        return "\n".join(lines)

    def summary(self) -> TokensSummary:
        """Over the logged steps (:class:`TokensSummary`).

        Returns:
            :class:`TokensSummary`: loss tokens per step (mean, min), the fraction of slots that are
            padding, the mean effective batch in examples and the number of low steps.

        Raises:
            ValueError: no step was logged yet.
        """
        if not self.history:
            raise ValueError("no step logged yet: call end_step() after each optimiser step")
        h, n = self.history, len(self.history)
        return TokensSummary(
            steps=n,
            mean_loss_tokens=sum(s.loss_tokens for s in h) / n,
            min_loss_tokens=min(s.loss_tokens for s in h),
            padding_fraction=1.0 - sum(s.non_pad_tokens for s in h) / sum(s.all_tokens for s in h),
            mean_effective_batch=sum(s.examples for s in h) / n,
            low_steps=sum(s.low for s in h),
        )
