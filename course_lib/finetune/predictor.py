"""The predictions a fine-tune plan's search probes: :class:`Predictor`, one plan's settings
through :func:`~course_lib.hf.memory.predict_hf_memory` by checkpointing mode and micro-batch,
remembered (the search and the report share them), and packed micro-batches drawn from the
documents' lengths. No torch here."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._checks import Checkpointing
from ..hf.memory import HFMemory, predict_hf_memory
from .options import Settings

if TYPE_CHECKING:  # numpy's import is a third of a plan's time: only packing needs it
    from ..hf.packing_plan import Packed

Lengths = str | os.PathLike[str] | Sequence[int] | None


class Predictor:
    """``predict_hf_memory`` for one plan's settings, by checkpointing mode and micro-batch.
    With packing, a micro-batch is the worst one drawn from the length distribution.

    Args:
        config: the config dict.
        seq_len: tokens per row (the packed rows' capacity).
        settings: the plan's settings.
        packing: ``None``, ``"rows"`` or ``"padding-free"``
            (:func:`~course_lib.finetune.options.packing_mode`).
        lengths: the documents' lengths for packing: a shipped histogram's name, a CSV path or
            the lengths.

    Raises:
        ValueError: packing without lengths, or lengths without packing.
    """

    def __init__(
        self, config: dict, seq_len: int, settings: Settings, packing: str | None,
        lengths: Lengths,
    ) -> None:  # fmt: skip
        self.config, self.seq_len, self.settings = config, seq_len, settings
        self.memo: dict[tuple[str, int, bool], HFMemory] = {}
        self.packed: Packed | None = None
        if packing is not None:
            if lengths is None:
                raise ValueError("packing needs the documents' lengths (lengths=, --lengths)")
            from ..hf.packing_plan import pack_sample

            source = os.fspath(lengths) if isinstance(lengths, os.PathLike) else lengths
            self.packed = pack_sample(source, seq_len if packing == "rows" else None)
        elif lengths is not None:
            raise ValueError("lengths are for packing: pass packing=True (--packing) too")
        self.packing = packing

    def __call__(self, mode: Checkpointing, rows: int, expected: bool = False) -> HFMemory:
        """The prediction at ``rows`` rows (the worst packed micro-batch, or the expected one).

        Args:
            mode: ``"off"`` or ``"blocks"``.
            rows: rows (padding-free: documents) in the micro-batch.
            expected: the expected packed micro-batch instead of the worst.

        Returns:
            The :class:`~course_lib.hf.memory.HFMemory`.

        Raises:
            ValueError: a setting the memory model refuses.
        """
        key = (mode, rows, expected)
        if key not in self.memo:
            batch, seq_len, documents = self.shape(rows, expected)
            per_row = max(1, min(documents, seq_len)) if self.packed is not None else None
            self.memo[key] = self._predict(mode, batch, seq_len, per_row)
        return self.memo[key]

    def _predict(
        self, mode: Checkpointing, batch: int, seq_len: int, documents: int | None
    ) -> HFMemory:
        return predict_hf_memory(
            self.config,
            batch,
            seq_len,
            checkpointing=mode,
            documents=documents,
            **self.settings.as_dict(),
        )

    def shape(self, rows: int, expected: bool = False) -> tuple[int, int, int]:
        """``(rows, seq_len, documents per row)`` of a micro-batch of ``rows`` rows.

        Args:
            rows: rows (padding-free: documents).
            expected: the expected packed micro-batch instead of the worst.

        Returns:
            ``(rows, seq_len, documents per row)``.
        """
        if self.packed is None:
            return rows, self.seq_len, 1
        worst, mean, _ = self.packed.shapes(rows, self.settings.attn_impl == "flash")
        return mean if expected else worst

    def documents_per_row(self) -> float:
        """Examples a row holds (packed: on average; padding-free and unpacked: one).

        Returns:
            Documents per row.
        """
        if self.packed is None or self.packed.capacity is None:
            return 1.0
        return float(self.packed.counts.mean())

    def tokens_per_row(self) -> float:
        """Tokens a row holds (packed: on average; padding-free: a document, on average).

        Returns:
            Tokens per row.
        """
        if self.packed is None:
            return float(self.seq_len)
        return float(self.packed.fills.mean())
