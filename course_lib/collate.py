"""Padding: the collator, completion-only labels, length-grouped batches, and what padding costs.

A padded batch of ``B`` examples has shape ``(B, T)`` with ``T`` the longest example in the batch
(rounded up to ``pad_to_multiple_of``). Every model runs over all ``B * T`` slots, so the waste is

    waste_fraction = padded_slots / (B * T) = 1 - Σ lengths / (B * T)

Grouping examples of similar length into the same batch (:class:`LengthGroupedSampler`) shrinks
``T - length`` for most examples without changing which examples are seen in an epoch.

Labels use the Hugging Face convention: ``-100`` marks tokens that are not trained on (the prompt
under ``completion_only`` and every padding slot); the model shifts labels by one inside.
Padding is decided by position (``t >= length``), never by comparing ids, so a real EOS keeps its
label even when ``pad_token_id`` equals the EOS id.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from course_lib._checks import non_negative_int, positive_int
from course_lib.batch import IGNORE_INDEX, PADDED_KEYS

Example = dict | Sequence[int] | np.ndarray | torch.Tensor  # a dict, or plain token ids


def example_tokens(
    example: Example, index: int, completion_only: bool, label_pad_id: int = IGNORE_INDEX
) -> tuple[np.ndarray, np.ndarray]:
    """``(input_ids, labels)`` of one example as int64 arrays, validated.

    ``example`` is a dict with ``input_ids`` and optionally ``labels`` (same length) or
    ``prompt_len`` (tokens ``[:prompt_len]`` are masked under ``completion_only``), or a plain
    sequence of token ids (every token is a label). ``index`` only names the example in errors.

    Args:
        example: a dict with ``input_ids`` (and ``labels`` or ``prompt_len``), or plain token ids.
        index: the example's place in its batch, for error messages.
        completion_only: mask the first ``prompt_len`` tokens' labels (no effect when the example
            brings its own ``labels``).
        label_pad_id: the label a masked token gets (``-100``).

    Returns:
        ``(input_ids, labels)``, int64 arrays ``(L,)`` of the example's length ``L``; labels
        unshifted (the model shifts them).

    Raises:
        ValueError: an example without ``input_ids``, with no tokens, non-integer or negative
            ids, labels of another length, or a ``prompt_len`` outside the example.
    """
    if isinstance(example, dict):
        if "input_ids" not in example:
            raise ValueError(f"example {index} has no 'input_ids' (keys: {sorted(example)})")
        raw_ids, raw_labels = example["input_ids"], example.get("labels")
        prompt_len = example.get("prompt_len", 0)
    else:
        raw_ids, raw_labels, prompt_len = example, None, 0
    ids = np.asarray(raw_ids.tolist() if torch.is_tensor(raw_ids) else raw_ids)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError(
            f"example {index} has {ids.size} tokens in shape {ids.shape}: every example needs a "
            "non-empty 1-D list of token ids; drop empty examples before collating"
        )
    if ids.dtype.kind not in "iu":
        raise ValueError(f"example {index} has non-integer token ids (dtype {ids.dtype})")
    if int(ids.min()) < 0:
        raise ValueError(f"example {index} has a negative token id {int(ids.min())}")
    ids = ids.astype(np.int64)
    if raw_labels is not None:
        labels = np.asarray(raw_labels.tolist() if torch.is_tensor(raw_labels) else raw_labels)
        if labels.shape != ids.shape:
            raise ValueError(
                f"example {index} has {labels.size} labels for {ids.size} tokens: labels must "
                "have one entry per token (use -100 for tokens not trained on)"
            )
        return ids, labels.astype(np.int64)
    if isinstance(prompt_len, bool) or not isinstance(prompt_len, (int, np.integer)):
        raise ValueError(f"example {index} has prompt_len={prompt_len!r}; expected an int")
    if not 0 <= prompt_len <= ids.size:
        raise ValueError(
            f"example {index} has prompt_len={prompt_len} outside [0, {ids.size}] (its length)"
        )
    labels = ids.copy()
    if completion_only:
        labels[:prompt_len] = label_pad_id
    return ids, labels


class PaddingCollator:
    """Right-pad a list of examples into ``input_ids``, ``attention_mask``, ``labels`` ``(B, T)``.

    ``T = max length`` in the batch, rounded up to a multiple of ``pad_to_multiple_of`` if given.
    ``attention_mask`` is 1 on real tokens, 0 on padding. ``labels`` is -100 (``label_pad_id``) on
    padding and, with ``completion_only``, on the prompt (``example["prompt_len"]`` tokens).

    Raises:
        ValueError: a negative ``pad_token_id`` or a ``pad_to_multiple_of`` below 1.
    """

    def __init__(
        self,
        pad_token_id: int,
        label_pad_id: int = IGNORE_INDEX,
        pad_to_multiple_of: int | None = None,
        completion_only: bool = True,
    ) -> None:
        """Remember how to pad; nothing is padded until the collator is called.

        Args:
            pad_token_id: the id written in padding slots (its labels are ``label_pad_id`` whatever
                the id, so it may equal EOS).
            label_pad_id: the label of padding and of masked prompt tokens.
            pad_to_multiple_of: round ``T`` up to a multiple of this (``None``: ``T`` is the
                longest example).
            completion_only: mask each example's first ``prompt_len`` tokens out of the loss.
        """
        non_negative_int("pad_token_id", pad_token_id)
        if pad_to_multiple_of is not None:
            positive_int("pad_to_multiple_of", pad_to_multiple_of, "or None")
        self.pad_token_id = pad_token_id
        self.label_pad_id = label_pad_id
        self.pad_to_multiple_of = pad_to_multiple_of
        self.completion_only = completion_only

    def __call__(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        """Pad ``examples`` into one batch.

        Args:
            examples: dicts with ``input_ids`` and ``prompt_len`` or ``labels``, or plain id lists.

        Returns:
            ``input_ids``, ``attention_mask`` and ``labels``, each ``(B, T)`` int64
            (:data:`~course_lib.batch.PADDED_KEYS`).

        Raises:
            ValueError: no example, or a bad one (:func:`example_tokens`).
        """
        if len(examples) == 0:
            raise ValueError("cannot collate an empty list of examples")
        pairs = [
            example_tokens(ex, i, self.completion_only, self.label_pad_id)
            for i, ex in enumerate(examples)
        ]
        seq_len = max(ids.size for ids, _ in pairs)
        if self.pad_to_multiple_of:
            seq_len = math.ceil(seq_len / self.pad_to_multiple_of) * self.pad_to_multiple_of
        B = len(pairs)
        input_ids = np.full((B, seq_len), self.pad_token_id, dtype=np.int64)  # (B, T)
        labels = np.full((B, seq_len), self.label_pad_id, dtype=np.int64)  # (B, T)
        attention_mask = np.zeros((B, seq_len), dtype=np.int64)  # (B, T)
        for b, (ids, lab) in enumerate(pairs):
            n = ids.size
            input_ids[b, :n] = ids
            labels[b, :n] = lab
            attention_mask[b, :n] = 1
        arrays = (input_ids, attention_mask, labels)  # in PADDED_KEYS order
        return {key: torch.from_numpy(a) for key, a in zip(PADDED_KEYS, arrays)}


def random_batches(
    n: int, batch_size: int, seed: int = 0, drop_last: bool = False
) -> list[list[int]]:
    """Indices ``0..n-1`` shuffled with ``seed`` and cut into batches of ``batch_size``.

    The last batch is shorter unless ``drop_last``. This is what a plain shuffling DataLoader does.

    Args:
        n: number of examples.
        batch_size: examples per batch.
        seed: seed of the shuffle (``random.Random``).
        drop_last: drop a last batch shorter than ``batch_size``.

    Returns:
        ``ceil(n / batch_size)`` lists of indices (one fewer with ``drop_last`` when ``n`` is not a
        multiple); every index once.

    Raises:
        ValueError: ``batch_size`` is not a positive int.
    """
    positive_int("batch_size", batch_size)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
    if drop_last and batches and len(batches[-1]) < batch_size:
        batches.pop()
    return batches


class LengthGroupedSampler:
    """Batches of similar length, reshuffled every epoch (megabatch shuffling).

    Each epoch: shuffle all indices (seed + epoch), cut them into megabatches of
    ``megabatch_mult * batch_size``, sort each megabatch by length (longest first) and cut it into
    batches. The batch holding the longest example goes first, so an out-of-memory error shows up
    at step 0 rather than mid-epoch. Every index appears exactly once per epoch; batches within a
    megabatch have similar lengths, yet the order still changes from epoch to epoch.
    Iterating yields lists of indices (use it as a DataLoader ``batch_sampler``).

    Raises:
        ValueError: ``lengths`` empty or not 1-D, or a size that is not a positive int.
    """

    def __init__(
        self, lengths: Sequence[int] | np.ndarray, batch_size: int, seed: int = 0,
        megabatch_mult: int = 50,
    ) -> None:  # fmt: skip
        """Group ``lengths`` into batches; the first epoch is 0.

        Args:
            lengths: tokens of every example, 1-D.
            batch_size: examples per batch.
            seed: with the epoch, seeds each epoch's shuffle.
            megabatch_mult: megabatch size in batches: larger groups lengths more tightly (less
                padding) but mixes the order less.
        """
        positive_int("batch_size", batch_size)
        self.lengths = np.asarray(lengths, dtype=np.int64)
        if self.lengths.ndim != 1 or self.lengths.size == 0:
            raise ValueError(
                f"lengths must be a non-empty 1-D sequence, got shape {self.lengths.shape}"
            )
        positive_int("megabatch_mult", megabatch_mult)
        self.batch_size = batch_size
        self.seed = seed
        self.megabatch_mult = megabatch_mult
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order ``__iter__`` yields (a different shuffle per epoch).

        Args:
            epoch: the epoch number (the shuffle is seeded with ``(seed, epoch)``).
        """
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return math.ceil(self.lengths.size / self.batch_size)

    def batches(self) -> list[list[int]]:
        """All batches of the current epoch, as lists of indices.

        Returns:
            ``ceil(n / batch_size)`` lists of example indices, the one holding the longest
            example first; every index exactly once.
        """
        rng = np.random.default_rng((self.seed, self.epoch))
        order = rng.permutation(self.lengths.size)
        mega = self.megabatch_mult * self.batch_size
        batches: list[list[int]] = []
        for start in range(0, order.size, mega):
            chunk = order[start : start + mega]
            # stable sort, longest first, so ties keep their shuffled order
            chunk = chunk[np.argsort(-self.lengths[chunk], kind="stable")]
            batches += [
                chunk[i : i + self.batch_size].tolist()
                for i in range(0, chunk.size, self.batch_size)
            ]
        longest = max(range(len(batches)), key=lambda b: int(self.lengths[batches[b]].max()))
        batches[0], batches[longest] = batches[longest], batches[0]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches())


@dataclass
class PaddingStats:
    """Token accounting of a list of batches (units: tokens, i.e. slots of a ``(B, T)`` tensor)."""

    n_batches: int
    real_tokens: int  # tokens that belong to an example
    total_slots: int  # Σ B * T over batches: what the model computes on
    padded_slots: int  # total_slots - real_tokens

    @property
    def waste_fraction(self) -> float:
        """Fraction of computed slots that are padding: ``padded_slots / total_slots``."""
        return self.padded_slots / self.total_slots if self.total_slots else 0.0

    @property
    def fill_fraction(self) -> float:
        return 1.0 - self.waste_fraction


def padding_stats(batches: Iterable[dict | Sequence[int]]) -> PaddingStats:
    """Real tokens, padded slots and waste fraction over ``batches``.

    Each batch is a dict with ``attention_mask`` ``(B, T)`` (a padded batch), a dict with
    ``document_ids`` ``(R, T)`` where -1 marks padding (a packed batch from ``PackingCollator``),
    or a plain list of example lengths (padded to its longest, computed without building tensors).

    Args:
        batches: padded batches, packed batches, or lists of example lengths (one list per batch).

    Returns:
        :class:`PaddingStats`: real tokens, slots computed (``Σ B T``) and padded slots, in tokens.

    Raises:
        ValueError: no batch, a dict batch without ``attention_mask`` or ``document_ids``, or a
            list of lengths that is empty or not positive.
    """
    batches = list(batches)
    if not batches:
        raise ValueError(
            "padding_stats needs at least one batch: the waste of nothing is undefined"
        )
    real = slots = n = 0
    for i, batch in enumerate(batches):
        n += 1
        if isinstance(batch, dict):
            if "attention_mask" in batch:
                mask = torch.as_tensor(batch["attention_mask"]).bool()
            elif "document_ids" in batch:
                mask = torch.as_tensor(batch["document_ids"]) >= 0
            else:
                raise ValueError(
                    f"batch {i} has neither 'attention_mask' nor 'document_ids' "
                    f"(keys: {sorted(batch)})"
                )
            real += int(mask.sum())
            slots += mask.numel()
        else:
            lengths = [int(x) for x in batch]
            if not lengths or min(lengths) <= 0:
                raise ValueError(
                    f"batch {i} must be a non-empty list of positive lengths, got {lengths[:8]}"
                )
            real += sum(lengths)
            slots += len(lengths) * max(lengths)
    return PaddingStats(n_batches=n, real_tokens=real, total_slots=slots, padded_slots=slots - real)
