"""Shared test helpers: a tiny seeded TinyGPT and padded micro-batches (``from helpers import``).

They live here, not in ``conftest.py``: a test module imports them by name, and several
``conftest.py`` files (one per test folder) would shadow each other as a module called
``conftest``.
"""

from __future__ import annotations

import torch

from course_lib.batch import IGNORE_INDEX
from course_lib.data import PAD_ID, VOCAB_SIZE
from course_lib.model import TinyGPT, TinyGPTConfig


def tiny_config(**overrides) -> TinyGPTConfig:
    """The course's test model: 2 blocks of d_model 64, 4 heads, rows up to 512 tokens."""
    fields = dict(vocab_size=VOCAB_SIZE, d_model=64, n_heads=4, n_layers=2, max_seq_len=512)
    return TinyGPTConfig(**{**fields, **overrides})


def tiny_model(dtype: torch.dtype = torch.float32, seed: int = 0, **overrides) -> TinyGPT:
    """A :func:`tiny_config` TinyGPT with weights fixed by ``seed``."""
    torch.manual_seed(seed)
    return TinyGPT(tiny_config(**overrides)).to(dtype)


def micro_batch(gen: torch.Generator, rows: list[tuple[int, int]]) -> dict:
    """A right-padded batch of rows ``(prompt_len, completion_len)``.

    Prompt and padding labels are -100, so with ``prompt_len >= 1`` a row holds exactly
    ``completion_len`` shifted loss tokens.
    """
    seq_len = max(p + c for p, c in rows)
    input_ids = torch.randint(0, VOCAB_SIZE, (len(rows), seq_len), generator=gen)  # (B, T)
    attention_mask = torch.zeros(len(rows), seq_len, dtype=torch.long)
    labels = torch.full((len(rows), seq_len), IGNORE_INDEX)
    for r, (p, c) in enumerate(rows):
        attention_mask[r, : p + c] = 1
        labels[r, p : p + c] = input_ids[r, p : p + c]
        input_ids[r, p + c :] = PAD_ID
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
