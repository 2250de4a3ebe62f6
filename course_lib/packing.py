"""Packing: several documents per fixed-length row, and the bookkeeping that keeps them apart.

Bin packing. Rows of ``capacity`` tokens are bins, documents are items. No packing can use fewer
rows than the lower bound ``ceil(Σ lengths / capacity)``; fill fraction is
``Σ lengths / (rows * capacity)``. Strategies:

``"bfd"``  best-fit decreasing: longest documents first, each into the row with the *least*
           remaining room that still fits it (a new row if none). At most 11/9 OPT + 1 rows.
``"greedy"`` next-fit in the given order: one open row, closed as soon as a document does not fit.
           At most twice optimal; what naive concatenate-and-cut packing does, minus the cut.

Neither is better on every input, but on realistic length distributions BFD is near the lower
bound. A document longer than ``capacity`` is an error unless ``split="chunk"``.

A packed batch (Hugging Face names, as ``DataCollatorWithFlattening`` produces) for ``R`` rows:

``input_ids``      (R, capacity)  documents back to back, then a padding tail
``labels``         (R, capacity)  -100 on every document's first token (nothing may predict it from
                                  the previous document), on the prompt (``completion_only``), and
                                  on the padding tail
``position_ids``   (R, capacity)  0, 1, 2, ... restarting at every document and at the tail
``document_ids``   (R, capacity)  index of the example in the collated list; -1 on the padding tail
``cu_seq_lens``    (S + 1,) int32 offsets of every segment (documents and padding tails) in the
                                  flattened ``R * capacity`` stream
``max_length``     int            the longest segment

With ``hf_flash_kwargs=True`` it also carries Hugging Face's flash-attention names for the same
offsets (``cu_seq_lens_q/_k``, ``max_length_q/_k``). Isolation is checked by
:mod:`course_lib.isolation`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from course_lib._checks import non_negative_int, one_of
from course_lib.batch import HF_FLASH_KEYS, IGNORE_INDEX, PACKED_KEYS

# bin packing of lengths lives in bins.py (no torch, for the planner); imported here too
from course_lib.bins import SPLITS, STRATEGIES, _check_capacity, lower_bound_rows, pack_lengths
from course_lib.collate import Example, example_tokens

__all__ = [
    "PackingCollator", "document_spans", "lower_bound_rows", "pack_lengths", "unpack",
    "SPLITS", "STRATEGIES",
]  # fmt: skip


class PackingCollator:
    """Pack a list of examples into rows of ``capacity`` tokens (see the module docstring).

    Examples are dicts with ``input_ids`` and ``prompt_len`` or ``labels`` (or plain id lists),
    as for :class:`course_lib.collate.PaddingCollator`. Rows come from :func:`pack_lengths`.

    Raises:
        ValueError: a ``capacity`` below 1, a negative ``pad_token_id``, or an unknown strategy
            or split.
    """

    def __init__(
        self,
        capacity: int,
        pad_token_id: int,
        completion_only: bool = True,
        label_pad_id: int = IGNORE_INDEX,
        strategy: str = "bfd",
        split: str | None = None,
        hf_flash_kwargs: bool = False,
    ) -> None:
        """Remember how to pack; nothing is packed until the collator is called.

        Args:
            capacity: tokens per row (``T`` of the batch).
            pad_token_id: the id written in each row's padding tail.
            completion_only: label only the completion (prompt tokens get ``label_pad_id``); False
                labels every token.
            label_pad_id: the label of a token that is not trained on (the tail, the prompt, each
                document's first token).
            strategy: ``"bfd"`` or ``"greedy"`` (:func:`pack_lengths`).
            split: ``None`` or ``"chunk"`` (cut documents longer than ``capacity``).
            hf_flash_kwargs: also return ``cu_seq_lens_q/_k`` and ``max_length_q/_k``.
        """
        self.capacity = _check_capacity(capacity)
        non_negative_int("pad_token_id", pad_token_id)
        one_of("strategy", strategy, STRATEGIES)
        one_of("split", split, SPLITS)
        self.hf_flash_kwargs = bool(hf_flash_kwargs)
        self.pad_token_id = pad_token_id
        self.completion_only = completion_only
        self.label_pad_id = label_pad_id
        self.strategy = strategy
        self.split = split

    def __call__(self, examples: Sequence[Example]) -> dict:
        """Pack ``examples`` into rows of ``capacity`` tokens: the batch of the module docstring.

        Args:
            examples: dicts with ``input_ids`` and ``prompt_len`` or ``labels``, or plain id lists.

        Returns:
            The packed batch: :data:`~course_lib.batch.PACKED_KEYS` (``input_ids``, ``labels``,
            ``position_ids``, ``document_ids`` int64 ``(R, capacity)``, ``cu_seq_lens`` int32
            ``(S + 1,)``, ``max_length`` int), plus the flash names when asked.

        Raises:
            ValueError: no example, or a bad one (:func:`~course_lib.collate.example_tokens`).
        """
        if len(examples) == 0:
            raise ValueError("cannot collate an empty list of examples")
        pairs = [
            example_tokens(ex, i, self.completion_only, self.label_pad_id)
            for i, ex in enumerate(examples)
        ]
        rows = pack_lengths(
            [ids.size for ids, _ in pairs], self.capacity, self.strategy, self.split
        )
        return self.collate_rows(pairs, rows)

    def collate_rows(
        self, pairs: Sequence[tuple[np.ndarray, np.ndarray]], rows: list[list[int]]
    ) -> dict:
        """Lay out ``(input_ids, labels)`` pairs in the given rows (indices into ``pairs``).

        Args:
            pairs: ``(input_ids, labels)`` int arrays per example, as
                :func:`~course_lib.collate.example_tokens` returns them.
            rows: the example indices of each row (an index once per split piece), as
                :func:`pack_lengths` returns them.

        Returns:
            The packed batch, as :meth:`__call__` returns it, with ``len(rows)`` rows.

        Raises:
            ValueError: a row that does not fit its examples, or an example not placed exactly once.
        """
        C, R = self.capacity, len(rows)
        input_ids = np.full((R, C), self.pad_token_id, dtype=np.int64)  # (R, C)
        labels = np.full((R, C), self.label_pad_id, dtype=np.int64)  # (R, C)
        position_ids = np.zeros((R, C), dtype=np.int64)  # (R, C)
        document_ids = np.full((R, C), -1, dtype=np.int64)  # (R, C)
        cu = []
        consumed: dict[int, int] = {}  # tokens of each example already laid out (split pieces)
        for r, row in enumerate(rows):
            t = 0
            for i in row:
                ids, lab = pairs[i]
                s = consumed.get(i, 0)
                n = min(C, ids.size - s)
                if n <= 0 or t + n > C:
                    raise ValueError(
                        f"row {r} does not fit example {i} ({ids.size} tokens) at "
                        f"offset {t} of capacity {C}"
                    )
                input_ids[r, t : t + n] = ids[s : s + n]
                labels[r, t : t + n] = lab[s : s + n]
                labels[r, t] = self.label_pad_id  # never predicted from the previous document
                position_ids[r, t : t + n] = np.arange(n)
                document_ids[r, t : t + n] = i
                cu.append(r * C + t)
                consumed[i] = s + n
                t += n
            if t < C:  # the padding tail is a segment of its own
                position_ids[r, t:] = np.arange(C - t)
                cu.append(r * C + t)
        for i, (ids, _) in enumerate(pairs):
            if consumed.get(i, 0) != ids.size:
                raise ValueError(
                    f"example {i} has {ids.size} tokens but the rows place "
                    f"{consumed.get(i, 0)}: every example must be packed exactly once"
                )
        cu.append(R * C)
        cu_seq_lens = torch.tensor(cu, dtype=torch.int32)
        max_length = int((cu_seq_lens[1:] - cu_seq_lens[:-1]).max())
        arrays = (input_ids, labels, position_ids, document_ids)
        values = (*map(torch.from_numpy, arrays), cu_seq_lens, max_length)  # PACKED_KEYS order
        batch: dict = dict(zip(PACKED_KEYS, values))
        if self.hf_flash_kwargs:  # HF_FLASH_KEYS: the offsets and longest, for queries and keys
            batch.update(zip(HF_FLASH_KEYS, (cu_seq_lens, cu_seq_lens, max_length, max_length)))
        return batch


def document_spans(batch: dict) -> list[tuple[int, int, int, int]]:
    """Where every document piece lies in a packed batch, in order.

    Args:
        batch: a packed batch (``document_ids`` and ``cu_seq_lens`` are read).

    Returns:
        ``(document_id, row, start, stop)`` per piece: tokens ``start:stop`` of row ``row``;
        padding tails are left out.
    """
    ids = batch["document_ids"]
    C = ids.shape[1]
    flat = ids.reshape(-1).tolist()  # (R * C,)
    cu = batch["cu_seq_lens"].tolist()
    return [
        (flat[a], a // C, a % C, a % C + (b - a)) for a, b in zip(cu[:-1], cu[1:]) if flat[a] >= 0
    ]


def unpack(batch: dict) -> dict[int, dict[str, list[int]]]:
    """Inverse of :class:`PackingCollator`: ``{example index: {"input_ids", "labels"}}``.

    Pieces of a split example are concatenated in row order. Labels come back as collated, so a
    document's first label reads -100.

    Args:
        batch: a packed batch from :class:`PackingCollator`.

    Returns:
        ``{example index: {"input_ids": [...], "labels": [...]}}`` for every example packed.
    """
    out: dict[int, dict[str, list[int]]] = {}
    for doc, r, a, b in document_spans(batch):
        entry = out.setdefault(doc, {"input_ids": [], "labels": []})
        entry["input_ids"] += batch["input_ids"][r, a:b].tolist()
        entry["labels"] += batch["labels"][r, a:b].tolist()
    return out
