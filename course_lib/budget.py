"""Budget: the three numbers that multiply, the largest micro-batch that fits, and a plan.

With ``B`` the per-device micro-batch, ``A`` the gradient accumulation steps, ``D`` the devices
and ``T`` the sequence length, the optimiser sees per step::

    effective_batch_size = B * A * D            (examples)
    tokens_per_step      = B * A * D * T        (tokens, counting full rows)

Memory is paid for ``B x T`` tokens at a time on each device; the update behaves like
``B * A * D`` examples. :func:`find_max_batch_size` finds the largest ``B`` by doubling then
bisection; :func:`plan` walks the seed's four-step procedure on the memory model.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from . import memory
from .model import TinyGPT, TinyGPTConfig

ADAMW_STATE_BYTES = 8  # two fp32 moments (exp_avg, exp_avg_sq) per parameter


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}; pass a whole number >= 1")
    return value


def effective_batch_size(
    per_device_batch_size: int, grad_accum_steps: int, n_devices: int = 1
) -> int:
    """Examples per optimiser step: ``per_device_batch_size * grad_accum_steps * n_devices``.

    The seed's example: ``effective_batch_size(2, 8) == 16`` on one GPU.
    """
    _positive_int("per_device_batch_size", per_device_batch_size)
    _positive_int("grad_accum_steps", grad_accum_steps)
    return per_device_batch_size * grad_accum_steps * _positive_int("n_devices", n_devices)


def tokens_per_step(
    micro_batch_size: int, seq_len: int, grad_accum_steps: int = 1, n_devices: int = 1
) -> int:
    """Tokens per optimiser step: ``micro_batch_size * seq_len * grad_accum_steps * n_devices``.

    Counts full rows of ``seq_len`` tokens (packed data, or the worst case). With padding the real
    count is lower: log the non-pad tokens during training too.
    """
    _positive_int("seq_len", seq_len)
    return effective_batch_size(micro_batch_size, grad_accum_steps, n_devices) * seq_len


def steps_per_epoch(dataset_size: int, effective_batch: int, drop_last: bool = False) -> int:
    """Optimiser steps in one pass over ``dataset_size`` examples.

    ``drop_last=False``: the final partial window is a step too, ``ceil(N / E)``.
    ``drop_last=True``: full steps only, ``N // E``. The seed's "800 examples at an effective batch
    of 64 is twelve optimiser steps" is ``800 // 64 == 12`` full steps; the last 32 examples make
    a thirteenth, half-sized step unless they are dropped.
    """
    _positive_int("dataset_size", dataset_size)
    _positive_int("effective_batch", effective_batch)
    return dataset_size // effective_batch if drop_last else -(-dataset_size // effective_batch)


class NoBatchFitsError(RuntimeError):
    """Even a batch of one does not fit."""


def is_out_of_memory(exc: BaseException) -> bool:
    """True for errors that mean "this size did not fit": ``torch.OutOfMemoryError`` (CUDA),
    ``MemoryError``, and the CPU allocator's ``RuntimeError("... can't allocate memory ...")``."""
    if isinstance(exc, (MemoryError, torch.cuda.OutOfMemoryError)):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def free_memory() -> None:
    """Collect unreachable tensors and return cached GPU blocks, so the next probe starts clean."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


@dataclass
class SearchResult:
    """``batch_size``: the largest size that fitted; ``tries``: probes made; ``history``: each
    probe ``(n, fitted)`` in order; ``capped``: stopped at ``limit`` (a larger size may fit)."""

    batch_size: int
    tries: int
    history: list[tuple[int, bool]]
    capped: bool = False


def _prober(fits: Callable[[int], bool], history: list) -> Callable[[int], bool]:
    def probe(n: int) -> bool:
        assert all(m != n for m, _ in history), f"batch size {n} probed twice"
        oom = False
        try:
            fitted = bool(fits(n))
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            fitted, oom = False, True
        if oom:  # outside the except block, so the traceback's tensors can be collected
            free_memory()
        history.append((n, fitted))
        return fitted

    return probe


def _no_fit(history: list) -> NoBatchFitsError:
    return NoBatchFitsError(
        f"even batch size 1 does not fit (probes: {history}); turn on activation checkpointing, "
        "shorten seq_len, use attn_impl='sdpa' instead of 'eager', or get more memory"
    )


def find_max_batch_size(
    fits: Callable[[int], bool], start: int = 1, limit: int | None = None
) -> SearchResult:
    """The exact largest ``n <= limit`` with ``fits(n)``, for a monotone ``fits`` (if ``n`` fits,
    every smaller size fits).

    Double from ``start`` while it fits (``start, 2 start, 4 start, ...``, capped at ``limit``);
    at the first failure, bisect between the last fit and that failure. If ``start`` itself fails,
    bisect in ``[1, start)``. For a threshold ``L`` and ``start=1``: at most
    ``2 * ceil(log2 L) + 2`` probes, none repeated. A probe that raises an out-of-memory error
    (:func:`is_out_of_memory`) counts as "does not fit" and memory is freed before the next one.
    Raises :class:`NoBatchFitsError` when size 1 fails.

    Threshold 37: ``start=1`` finds 37 in 12 probes (1, 2, 4, ..., 64, then 48, 40, 36, 38, 37);
    ``start=128`` in 8 (128, 64, 32, 48, 40, 36, 38, 37). accelerate's
    ``find_executable_batch_size`` from 128 (``n = int(0.9 * n)`` after each OOM; see
    :func:`shrink_search`) needs 12 probes and stops at 36, because its steps skip over 37.
    """
    _positive_int("start", start)
    if limit is not None and _positive_int("limit", limit) < start:
        raise ValueError(f"limit={limit} is below start={start}; raise limit or lower start")
    history: list[tuple[int, bool]] = []
    probe = _prober(fits, history)
    lo, hi = 0, None  # lo: largest size known to fit (0: none yet); hi: smallest known to fail
    if probe(start):
        lo = start
        while hi is None and lo != limit:
            n = 2 * lo if limit is None else min(2 * lo, limit)
            lo, hi = (n, None) if probe(n) else (lo, n)
    else:
        hi = start
    while hi is not None and hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if probe(mid) else (lo, mid)
    if lo == 0:
        raise _no_fit(history)
    return SearchResult(lo, len(history), history, capped=hi is None)


def shrink_search(
    fits: Callable[[int], bool], start: int = 128, factor: float = 0.9
) -> SearchResult:
    """accelerate's rule, for comparison: try ``start``, and after each failure
    ``n = int(n * factor)`` until a size fits. Neither exact nor logarithmic."""
    _positive_int("start", start)
    if not 0 < factor < 1:
        raise ValueError(f"factor must lie strictly between 0 and 1, got {factor}")
    history: list[tuple[int, bool]] = []
    probe, n = _prober(fits, history), start
    while n > 0:
        if probe(n):
            return SearchResult(n, len(history), history)
        n = int(n * factor)
    raise _no_fit(history)


class MemoryProbe:
    """``fits(n)``: does one training step of :class:`TinyGPT` at ``n x seq_len`` fit the budget?

    Runs a real forward + backward at the *worst-case* shape (``n`` full rows of ``seq_len``
    tokens, every token a label) under :func:`memory.measure` and adds what exists before it::

        needed(n) = weights + AdamW state (8 bytes/param) + measured peak (activations + grads)

    On the CPU the peak is counted exactly and compared with ``budget_bytes``. On a GPU the
    attempt is real (the AdamW state is allocated too, so an OOM is honest; ``budget_bytes=None``
    lets the card decide); an out-of-memory error propagates and :func:`find_max_batch_size`
    counts it as "does not fit". ``needed`` keeps every figure, by ``n``.
    """

    def __init__(
        self,
        config: TinyGPTConfig,
        seq_len: int,
        budget_bytes: int | None = None,
        device=None,
        dtype: torch.dtype = torch.float32,
        seed: int = 0,
    ) -> None:
        if _positive_int("seq_len", seq_len) > config.max_seq_len:
            raise ValueError(f"seq_len={seq_len} exceeds config.max_seq_len={config.max_seq_len}")
        self.config, self.seq_len, self.budget_bytes = config, seq_len, budget_bytes
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        with torch.random.fork_rng(devices=[]):  # seeded weights, the caller's RNG untouched
            torch.manual_seed(seed)
            self.model = TinyGPT(config).to(self.device, dtype)
        params = list(self.model.parameters())
        self.fixed_bytes = sum(p.numel() * (p.element_size() + ADAMW_STATE_BYTES) for p in params)
        on_gpu = self.device.type == "cuda"
        self._adamw_state = [torch.zeros(2, *p.shape, device=self.device) for p in params if on_gpu]
        self.generator = torch.Generator(self.device).manual_seed(seed)
        self.needed: dict[int, int] = {}

    def __call__(self, n: int) -> bool:
        ids = torch.randint(
            self.config.vocab_size, (n, self.seq_len), device=self.device, generator=self.generator
        )  # (n, T): full rows, the worst case
        batch = {"input_ids": ids, "labels": ids}
        report = memory.measure_step(self.model, batch, device=self.device)
        self.needed[n] = self.fixed_bytes + report.peak_bytes
        return self.budget_bytes is None or self.needed[n] <= self.budget_bytes


def memory_probe(
    config: TinyGPTConfig,
    seq_len: int,
    budget_bytes: int | None = None,
    device=None,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> MemoryProbe:
    """A measured ``fits(n)`` for :func:`find_max_batch_size`; see :class:`MemoryProbe`."""
    return MemoryProbe(config, seq_len, budget_bytes, device, dtype, seed)


@dataclass
class TrainingMemory:
    """Bytes per device for one AdamW training step (plain data parallel: every device holds a
    full replica). ``weights``, ``gradients``: one ``dtype`` element per parameter each;
    ``optimizer_state``: two fp32 moments per parameter; ``activations``: the memory model's peak
    above the parameters (:func:`memory.activation_bytes`).

    Exact when gradients stay allocated between steps (``zero_grad(set_to_none=False)``). With
    ``set_to_none=True`` the activation peak already holds the gradients made by then, so the sum
    over-counts by at most ``gradients``, the safe side: on small TinyGPTs the measured peak
    (:class:`MemoryProbe`) was 90-99% of this sum. The AdamW step's temporaries are not counted."""

    weights: int
    gradients: int
    optimizer_state: int
    activations: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer_state + self.activations


def training_memory(
    config: TinyGPTConfig, micro_batch_size: int, seq_len: int, dtype: torch.dtype = torch.float32
) -> TrainingMemory:
    """``P * (s + s + 8) + activations(B, T)`` bytes, for ``P`` parameters of ``s`` bytes."""
    n_params, size = memory.parameter_count(config), torch.empty(0, dtype=dtype).element_size()
    act = memory.activation_bytes(config, micro_batch_size, seq_len, dtype=dtype).total
    return TrainingMemory(n_params * size, n_params * size, n_params * ADAMW_STATE_BYTES, int(act))


@dataclass
class Plan:
    """What :func:`plan` chose, the figures behind it, and warnings in plain words. ``print()`` it
    for a table."""

    config: TinyGPTConfig
    seq_len: int
    dataset_size: int
    micro_batch_size: int
    grad_accum_steps: int
    n_devices: int
    max_micro_batch_size: int
    memory: TrainingMemory
    memory_bytes: int
    target_effective: tuple[int, int]
    min_tokens_per_step: int
    search: SearchResult
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dtype: torch.dtype = torch.float32

    @property
    def effective_batch_size(self) -> int:
        return self.micro_batch_size * self.grad_accum_steps * self.n_devices

    @property
    def tokens_per_step(self) -> int:
        return self.effective_batch_size * self.seq_len

    @property
    def steps_per_epoch(self) -> int:
        """Full optimiser steps per epoch: ``dataset_size // effective_batch_size``."""
        return self.dataset_size // self.effective_batch_size

    def rows(self) -> list[tuple[str, str]]:
        c, mem, fb, e = self.config, self.memory, memory.format_bytes, self.effective_batch_size
        (lo, hi), fixed = self.target_effective, mem.total - mem.activations
        return [
            (
                "model",
                f"d_model={c.d_model} n_layers={c.n_layers} n_heads={c.n_heads} "
                f"vocab={c.vocab_size} attn={c.attn_impl} ({memory.parameter_count(c):,} params, "
                f"{str(self.dtype).removeprefix('torch.')})",
            ),
            ("sequence length", f"{self.seq_len:,} tokens per row"),
            (
                "micro-batch",
                f"{self.micro_batch_size} per device (largest that fits: "
                f"{self.max_micro_batch_size}{'+' if self.search.capped else ''})",
            ),
            (
                "grad accumulation",
                f"{self.grad_accum_steps} micro-batch"
                f"{'es' * (self.grad_accum_steps > 1)} per optimiser step",
            ),
            ("devices", f"{self.n_devices}"),
            (
                "effective batch",
                f"{e} = {self.micro_batch_size} x {self.grad_accum_steps} x "
                f"{self.n_devices} (target {lo}-{hi})",
            ),
            (
                "tokens per step",
                f"{self.tokens_per_step:,} (full rows; target >= {self.min_tokens_per_step:,})",
            ),
            (
                "steps per epoch",
                f"{self.steps_per_epoch} full ({self.dataset_size:,} // {e}; "
                f"{self.dataset_size % e} examples left over)",
            ),
            (
                "memory per device",
                f"{fb(mem.total)} of {fb(self.memory_bytes)} "
                f"({100 * mem.total / self.memory_bytes:.0f}%): {fb(fixed)} weights+grads+AdamW, "
                f"{fb(mem.activations)} activations",
            ),
            ("checkpointing", str(c.checkpointing or "off")),
        ]

    def to_table(self) -> str:
        rows = self.rows()
        width = max(len(k) for k, _ in rows)
        lines = [f"{k:<{width}}  {v}" for k, v in rows]
        return "\n".join(
            lines + [f"note: {n}" for n in self.notes] + [f"warning: {w}" for w in self.warnings]
        )

    __str__ = to_table


def _choose_shape(m_max, n_devices, seq_len, dataset_size, tmin, tmax, min_tokens, min_steps):
    """Best ``(micro, accum, devices)`` with ``tmin <= m*a*d <= tmax``, ranked by: tokens per step
    reach ``min_tokens``; at least ``min_steps`` full steps per epoch; more devices; a larger
    micro-batch; fewer accumulation steps. ``a`` is the least meeting both lower targets."""
    best, best_key = None, None
    for d in range(min(n_devices, tmax), 0, -1):
        for m in range(min(m_max, tmax // d), 0, -1):
            md = m * d
            a_lo, a_hi = max(1, -(-tmin // md)), tmax // md
            if a_lo > a_hi:
                continue
            a = min(max(a_lo, -(-min_tokens // (md * seq_len))), a_hi)
            key = (md * a * seq_len >= min_tokens, dataset_size // (md * a) >= min_steps, d, m, -a)
            if best_key is None or key > best_key:
                best, best_key = (m, a, d), key
            if key[0] and key[1]:  # the first fully satisfying one in (d, m) order is the best
                return best
    return best


def plan(
    config: TinyGPTConfig,
    memory_bytes: int,
    seq_len: int,
    dataset_size: int,
    target_effective: tuple[int, int] = (16, 64),
    min_tokens_per_step: int = 4000,
    n_devices: int = 1,
    dtype: torch.dtype = torch.float32,
    min_steps_per_epoch: int = 25,
) -> Plan:
    """The seed's procedure on the memory model (:func:`training_memory`, bytes per device).

    1. Micro-batch ``B``: the largest with ``training_memory(B) <= memory_bytes``
       (:func:`find_max_batch_size`, capped at ``min(target max, dataset_size)``). If ``B = 1``
       does not fit, retry with ``checkpointing="blocks"`` and warn; if that fails too, raise
       :class:`NoBatchFitsError`. The target range is clipped to ``dataset_size``.
    2. Accumulation ``A`` and devices ``D``: ``tmin <= B*A*D <= tmax`` with the least ``A`` that
       also gives ``B*A*D*seq_len >= min_tokens_per_step`` (:func:`_choose_shape`). ``B`` drops
       below the largest that fits only to meet the targets; a note says so.
    3. Warnings: tokens per step below target (raise accumulation, not the learning rate); fewer
       than ``min_steps_per_epoch`` full steps per epoch (a rule of thumb: the seed's 800
       examples at 64 give 12); checkpointing switched on; devices left idle.
    """
    for name in (
        "memory_bytes",
        "seq_len",
        "dataset_size",
        "min_tokens_per_step",
        "n_devices",
        "min_steps_per_epoch",
    ):
        _positive_int(name, locals()[name])
    if seq_len > config.max_seq_len:
        raise ValueError(
            f"seq_len={seq_len} exceeds config.max_seq_len={config.max_seq_len}; "
            "build the config with max_seq_len >= seq_len"
        )
    if len(target_effective) != 2:
        raise ValueError(f"target_effective must be (min, max), got {target_effective!r}")
    tmin, tmax = (
        _positive_int(f"target_effective[{i}]", v) for i, v in enumerate(target_effective)
    )
    if tmin > tmax:
        raise ValueError(f"target_effective={target_effective}: min {tmin} exceeds max {tmax}")

    notes: list[str] = []
    warnings: list[str] = []
    fb = memory.format_bytes
    lo, hi = min(tmin, dataset_size), min(tmax, dataset_size)  # a step never sees more than N
    if dataset_size < tmin:
        warnings.append(
            f"the dataset has {dataset_size} examples, fewer than the smallest target "
            f"effective batch ({tmin}): one optimiser step per epoch at most; get "
            "more data or lower the target"
        )

    def search(cfg: TinyGPTConfig) -> SearchResult:
        fits = lambda n: training_memory(cfg, n, seq_len, dtype).total <= memory_bytes
        return find_max_batch_size(fits, start=1, limit=hi)

    try:
        result = search(config)
    except NoBatchFitsError:
        plain = training_memory(config, 1, seq_len, dtype)
        ckpt = replace(config, checkpointing="blocks")
        with_ckpt = training_memory(ckpt, 1, seq_len, dtype)
        fixed = with_ckpt.total - with_ckpt.activations
        if config.checkpointing in (True, "blocks") or with_ckpt.total > memory_bytes:
            raise NoBatchFitsError(
                f"micro-batch 1 at seq_len={seq_len} needs {fb(plain.total)} without activation "
                f"checkpointing and {fb(with_ckpt.total)} with it ({fb(fixed)} of that is "
                "weights, gradients and AdamW state), more than "
                f"the {fb(memory_bytes)} budget; shorten seq_len, use attn_impl='sdpa' or a "
                "smaller model, or get more memory"
            ) from None
        config, result = ckpt, search(ckpt)
        warnings.append(
            f"micro-batch 1 does not fit without activation checkpointing ({fb(plain.total)} > "
            f"{fb(memory_bytes)}), so the plan turns on checkpointing='blocks': each block is "
            "recomputed in the backward pass, roughly 20-30% more time per step"
        )

    m_max = result.batch_size
    m, a, d = _choose_shape(
        m_max, n_devices, seq_len, dataset_size, lo, hi, min_tokens_per_step, min_steps_per_epoch
    )
    p = Plan(
        config,
        seq_len,
        dataset_size,
        m,
        a,
        d,
        m_max,
        training_memory(config, m, seq_len, dtype),
        memory_bytes,
        (tmin, tmax),
        min_tokens_per_step,
        result,
        notes,
        warnings,
        dtype,
    )
    e = p.effective_batch_size
    if m < m_max:
        notes.append(
            f"micro-batch {m} is below the largest that fits ({m_max}) to keep the "
            f"effective batch within {lo}-{hi} and the steps per epoch up"
        )
    if d < n_devices:
        warnings.append(
            f"only {d} of {n_devices} devices are used: a batch of 1 on each of "
            f"more would push the effective batch past {hi}"
        )
    if p.tokens_per_step < min_tokens_per_step:
        warnings.append(
            f"tokens per step is {p.tokens_per_step:,}, below {min_tokens_per_step:,} even at "
            f"effective batch {hi}, the top of the range: gradients will be noisy. Raise gradient "
            f"accumulation (a larger target max), not the learning rate"
        )
    if p.steps_per_epoch < min_steps_per_epoch:
        warnings.append(
            f"one epoch of {dataset_size:,} examples at effective batch {e} is only "
            f"{p.steps_per_epoch} full optimiser step{'s' * (p.steps_per_epoch != 1)} "
            f"({dataset_size:,} // {e}), too few to move "
            "an adapter anywhere useful: lower the effective batch (a smaller target) or train "
            "more epochs; do not chase a large effective batch on a small dataset"
        )
    return p
