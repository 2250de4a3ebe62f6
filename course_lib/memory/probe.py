"""The measured probe: does one real TinyGPT training step at ``n`` rows fit the budget?

:class:`MemoryProbe` is the measured ``fits(n)`` of :func:`course_lib.fit.find_largest` (its
predicted twin is :class:`course_lib.fit.PredictedProbe`): it runs a forward + backward at the
worst-case shape under :func:`~course_lib.memory.meter.measure_step` and adds what exists before
the step.
"""

from __future__ import annotations

import torch

from .. import _checks
from .._checks import positive_int, seq_len_within
from ..batch import random_batch
from ..model import TinyGPT, TinyGPTConfig
from ..units import ADAMW_STATE_BYTES
from .meter import Device, measure_step, pick_device


class MemoryProbe:
    """``fits(n)``: does one training step of :class:`TinyGPT` at ``n x seq_len`` fit?

    Each call runs a real forward + backward at the *worst-case* shape (``n`` full rows of
    ``seq_len`` tokens, every token a label) and adds what exists before it::

        needed(n) = weights + AdamW state (8 bytes/param) + measured peak (activations + grads)

    On the CPU the peak is counted exactly and compared with ``memory_budget``. On a GPU the
    attempt is real (the AdamW state is allocated too, so an out-of-memory error is honest;
    ``memory_budget=None`` lets the card decide): the error propagates and the search counts it
    as "does not fit". ``needed`` keeps every figure, by ``n``.

    Args:
        config: the model to build (its weights from ``seed``, the caller's RNG untouched).
        seq_len: tokens per row, at most ``config.max_seq_len``.
        memory_budget: bytes, or a string with a unit (``"24MiB"``); ``None``: no budget.
        device: where the steps run (default: CUDA when available, else the CPU).
        dtype: the model's dtype.
        seed: the weights' and the batches' seed.

    Raises:
        ValueError: a ``seq_len`` that is not positive or is longer than ``max_seq_len``, or a
            budget that is not an amount of memory.
    """

    def __init__(
        self,
        config: TinyGPTConfig,
        seq_len: int,
        memory_budget: int | str | None = None,
        device: Device = None,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
    ) -> None:
        self.config, self.seq_len = config, seq_len_within(seq_len, config.max_seq_len)
        budget = None if memory_budget is None else _checks.memory_budget(memory_budget)
        self.memory_budget = budget
        self.device = pick_device(device)
        self.seed = seed
        with torch.random.fork_rng(devices=[]):  # seeded weights, the caller's RNG untouched
            torch.manual_seed(seed)
            self.model = TinyGPT(config).to(self.device, dtype)
        params = list(self.model.parameters())
        self.fixed_bytes = sum(p.numel() * (p.element_size() + ADAMW_STATE_BYTES) for p in params)
        on_gpu = self.device.type == "cuda"
        self._adamw_state = [torch.zeros(2, *p.shape, device=self.device) for p in params if on_gpu]
        self.needed: dict[int, int] = {}

    def __call__(self, n: int) -> bool:
        """Run one step at ``n`` full rows; True when it fits (always, without a budget).

        Args:
            n: rows of the batch, each ``seq_len`` tokens.

        Returns:
            True when ``fixed_bytes`` + the step's measured peak fits ``memory_budget`` (recorded
            in ``needed[n]``, bytes); always True without a budget.

        Raises:
            ValueError: ``n`` is not a positive int.
            torch.OutOfMemoryError: on a GPU, when the step does not fit the card (the search counts
                it as "does not fit").
        """
        positive_int("n", n)
        batch = random_batch(self.config.vocab_size, n, self.seq_len, self.seed, self.device)
        report = measure_step(self.model, batch, device=self.device)
        self.needed[n] = self.fixed_bytes + report.peak_bytes
        return self.memory_budget is None or self.needed[n] <= self.memory_budget
