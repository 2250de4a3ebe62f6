"""Gradient noise: how far one step's gradient lands from the full data's, by tokens and examples.

For every example ``j`` of a pool, take the gradient ``s_j`` of its *summed* loss and its loss
tokens ``n_j``. A token-weighted step of ``K`` examples drawn at random has the gradient
``g = sum_j s_j / sum_j n_j``; the pool's own is ``g* = sum s / sum n``. The step's noise is
``E ||g - g*||^2``. With ``d_j = s_j - n_j g*`` and the Gram matrix ``G = D Dᵀ``, a step that
draws example ``j`` ``c_j`` times has the squared error ``cᵀ G c / (cᵀ n)^2``: every draw is a
quadratic form, so thousands of random steps cost no extra backward pass.

:func:`gradient_noise` measures it for short and long completions and the whole pool; lesson 3
draws it (:func:`course_lib.figures.accumulation.plot_gradient_noise`) and reads off the
noise-to-signal ratio of a one-example step, ``noise_to_signal``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .accumulation import flat_grad
from .collate import PaddingCollator
from .data import PAD_ID

GROUPS = ("short", "long", "all")  # completions below and above the median, and every one


@dataclass
class GradientNoise:
    """:func:`gradient_noise`, per group of :data:`GROUPS`: ``tokens_per_example`` (mean loss
    tokens), ``one_example_noise`` (the noise of a one-example step), ``signal`` (``||g*||^2``)
    and ``noise[group][i]``, the measured noise of steps of ``ks[i]`` examples."""

    ks: list[int]
    tokens_per_example: dict[str, float]
    one_example_noise: dict[str, float]
    signal: dict[str, float]
    noise: dict[str, list[float]]
    device: str

    @property
    def noise_to_signal(self) -> float:
        """Noise over signal of a one-example step from the whole pool (falls as ``1 / K``)."""
        return self.one_example_noise["all"] / self.signal["all"]

    def summary(self, tokens: Sequence[int] = (900, 8_000, 64_000)) -> str:
        """How much noisier short examples are per example and per token, and the noise-to-signal
        ratio at a few loss tokens per step.

        Args:
            tokens: loss tokens per step at which to state the noise-to-signal ratio (it falls as
                ``1 / tokens``).

        Returns:
            Lines of text: the short/long ratio at equal examples and at equal tokens per step, then
            one line per entry of ``tokens``.
        """
        e, t = self.one_example_noise, self.tokens_per_example
        per_token = e["short"] * t["short"] / (e["long"] * t["long"])
        lines = [
            f"at the same examples per step, short examples are {e['short'] / e['long']:.0f}× "
            f"noisier than long; at the same tokens per step, {per_token:.1f}×"
        ]
        for n in tokens:
            ratio = self.noise_to_signal * t["all"] / n
            lines.append(f"{n:>6,} loss tokens per step: noise-to-signal ratio {ratio:.3g}")
        return "\n".join(lines)


def example_gradients(model: torch.nn.Module, examples: Sequence[dict]) -> torch.Tensor:
    """Each example's gradient of its summed loss (``num_items_in_batch=1``), one row each.

    The model's ``.grad`` is cleared afterwards.

    Args:
        model: a model taking padded batches and ``num_items_in_batch``.
        examples: dicts with ``input_ids`` and ``prompt_len`` (completion-only labels).

    Returns:
        float64 ``(examples, P)``, ``P`` the parameter elements: row ``j`` is ``s_j``.
    """
    device, collate, rows = next(model.parameters()).device, PaddingCollator(PAD_ID), []
    for ex in examples:
        batch = {k: v.to(device) for k, v in collate([ex]).items()}
        model.zero_grad(set_to_none=True)
        model(**batch, num_items_in_batch=1).loss.backward()  # the gradient of S_j
        rows.append(flat_grad(model))
    model.zero_grad(set_to_none=True)
    return torch.stack(rows)


def gradient_noise(
    model: torch.nn.Module,
    examples: Sequence[dict],
    ks: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128),
    draws: int = 200,
    seed: int = 0,
) -> GradientNoise:
    """Measure the gradient noise of token-weighted steps of ``k`` examples for each ``k``.

    Steps are drawn with replacement from the examples that have a completion, split at the
    median completion length (module docstring).

    Args:
        model: the model whose gradients are measured (one backward pass per example).
        examples: dicts with ``input_ids`` and ``prompt_len``.
        ks: examples per step.
        draws: random steps per ``k`` and group.
        seed: seed of the draws.

    Returns:
        :class:`GradientNoise`: per group (``"short"``, ``"long"``, ``"all"``) the mean loss
        tokens per example, the one-example noise, the signal ``||g*||²`` and the measured noise
        ``E ||g - g*||²`` per ``k`` (squared gradient norms, in the model's loss units).

    Raises:
        ValueError: fewer than two examples with a completion.
    """
    pool = [ex for ex in examples if len(ex["input_ids"]) > ex["prompt_len"]]
    if len(pool) < 2:
        raise ValueError(
            f"gradient_noise needs at least 2 examples with a completion, got {len(pool)}"
        )
    n_tok = torch.tensor([len(ex["input_ids"]) - ex["prompt_len"] for ex in pool],
                         dtype=torch.float64)  # fmt: skip
    grads = example_gradients(model, pool)
    order = torch.argsort(n_tok)
    groups = {"short": order[: len(order) // 2], "long": order[len(order) // 2 :], "all": order}
    gen = torch.Generator().manual_seed(seed)
    result = GradientNoise(list(ks), {}, {}, {}, {}, str(next(model.parameters()).device))
    for name, idx in groups.items():
        s, n = grads[idx], n_tok[idx]
        g_star = s.sum(0) / n.sum()  # the group's full-data gradient (mean over its tokens)
        d = s - n[:, None] * g_star
        gram = d @ d.T  # (m, m): every squared error is a quadratic form in it
        result.tokens_per_example[name] = float(n.mean())
        result.one_example_noise[name] = float(gram.diagonal().mean()) / float(n.mean()) ** 2
        result.signal[name] = float(g_star.norm() ** 2)
        result.noise[name] = []
        for k in ks:  # c: how often each example is drawn, for every one of `draws` steps
            c = torch.zeros(draws, len(idx), dtype=torch.float64).scatter_add_(
                1, torch.randint(0, len(idx), (draws, k), generator=gen),
                torch.ones(draws, k, dtype=torch.float64),
            )  # fmt: skip
            result.noise[name].append(float((((c @ gram) * c).sum(1) / (c @ n) ** 2).mean()))
    return result
