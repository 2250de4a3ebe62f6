"""Lesson 3's accumulation windows, with the loss-token count of every micro-batch set by hand.

Real windows mix short and long completions by chance. To show how the mean-of-means error grows
with the imbalance, :func:`window_from_completion_lens` builds windows whose every row keeps its
prompt and exactly ``c`` completion tokens of a real synthetic example (so ``c`` shifted loss
tokens), and :func:`spread_completion_lens` chooses ``c`` per micro-batch so that the fullest
holds ``spread`` times the loss tokens of the emptiest. :func:`accumulation_window` measures one
such window in both accumulation modes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ._checks import non_negative_int, positive_int, positive_number
from .accumulation import gradient_error
from .batch import count_loss_tokens
from .collate import PaddingCollator
from .data import PAD_ID


def spread_completion_lens(
    grad_accum_steps: int, spread: float, micro_batch_size: int = 2, shortest: int = 4
) -> list[list[int]]:
    """Completion tokens per row, per micro-batch: ``shortest * spread**(i / (K - 1))`` for
    micro-batch ``i`` of ``K`` (geometric, rounded), the same for every row of a micro-batch.

    ``spread`` is the ratio of the longest to the shortest micro-batch's loss tokens (1 = equal).
    """
    k = positive_int("grad_accum_steps", grad_accum_steps)
    positive_int("micro_batch_size", micro_batch_size)
    positive_int("shortest", shortest)
    if positive_number("spread", spread) < 1:
        raise ValueError(f"spread must be >= 1 (longest / shortest micro-batch), got {spread}")
    lens = [round(shortest * spread ** (i / (k - 1))) if k > 1 else shortest for i in range(k)]
    return [[c] * micro_batch_size for c in lens]


def window_from_completion_lens(
    examples, completion_lens: Sequence[Sequence[int]], start: int = 0
) -> list[dict]:
    """One padded micro-batch (``PaddingCollator``, completion-only labels) per inner list.

    Row ``r`` of micro-batch ``i`` is the next unused example (from ``start``, wrapping) whose
    completion has at least ``completion_lens[i][r]`` tokens, cut right after them: it keeps its
    whole prompt and holds exactly ``completion_lens[i][r]`` loss tokens (0 is allowed).
    """
    examples = list(examples)
    if not examples:
        raise ValueError("no examples to build a window from")
    collate = PaddingCollator(PAD_ID)
    used: set[int] = set()
    i = non_negative_int("start", start) % len(examples)
    window = []
    for rows in completion_lens:
        batch = []
        for c in rows:
            non_negative_int("completion length", c)
            for _ in range(len(examples)):
                j, i = i, (i + 1) % len(examples)
                p = examples[j]["prompt_len"]
                if j not in used and len(examples[j]["input_ids"]) - p >= c:
                    used.add(j)
                    batch.append({"input_ids": examples[j]["input_ids"][: p + c], "prompt_len": p})
                    break
            else:
                raise ValueError(
                    f"no unused example has a completion of {c} tokens or more: pass more "
                    "(or longer) examples, or ask for shorter completions"
                )
        window.append(collate(batch))
    return window


@dataclass
class AccumulationWindow:
    """One window, measured: ``loss_tokens[i]`` is ``n_i`` of micro-batch ``i`` (shifted labels
    that are not -100); ``errors[mode]`` the relative gradient error of accumulating it in that
    mode against one full batch (:func:`~course_lib.accumulation.gradient_error`)."""

    micro_batch_size: int
    loss_tokens: list[int]
    errors: dict[str, float]

    @property
    def spread(self) -> float:
        """Loss tokens of the fullest micro-batch over those of the emptiest (at least 1 token)."""
        return max(self.loss_tokens) / max(min(self.loss_tokens), 1)


def accumulation_window(
    model: torch.nn.Module,
    examples,
    grad_accum_steps: int = 4,
    spread: float = 8,
    micro_batch_size: int = 2,
    shortest: int = 4,
    start: int = 0,
) -> AccumulationWindow:
    """Build a window of ``grad_accum_steps`` micro-batches with the given ``spread``
    (:func:`spread_completion_lens`, :func:`window_from_completion_lens`) on ``model``'s device
    and measure both modes' gradient error. Runs ``2 (K + 1)`` forward/backward passes; the
    model's ``.grad`` is left as it was."""
    lens = spread_completion_lens(grad_accum_steps, spread, micro_batch_size, shortest)
    device = next(model.parameters()).device
    window = [
        {k: v.to(device) for k, v in mb.items()}
        for mb in window_from_completion_lens(examples, lens, start)
    ]
    return AccumulationWindow(
        micro_batch_size=micro_batch_size,
        loss_tokens=[count_loss_tokens(mb["labels"]) for mb in window],
        errors={mode: gradient_error(model, window, mode) for mode in ("mean", "token_weighted")},
    )
