"""The fine-tune plan's search: :func:`plan_finetune` reads the model and the card, checks the
settings (:mod:`~course_lib.finetune.options`), finds the largest micro-batch that fits at the
top of the device band (:func:`course_lib.fit`'s "what fits" question, each probe a
:class:`~course_lib.finetune.predictor.Predictor` call), then the recipe's micro-batch and
accumulation, and has :mod:`~course_lib.finetune.text` write the plan's words. No torch here."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

from .. import _checks
from .._checks import Checkpointing, checkpointing_mode, positive_int
from ..hf.arch import config_dict
from ..hf.cards import card_memory, card_name
from ..hf_configs import load_config
from .options import MODES, Run, Targets, packing_mode, settings
from .plan import FinetunePlan
from .predictor import Lengths, Predictor
from .text import describe
from .verdict import advise as advice_for
from .verdict import verdict_of

MAX_ROWS = 10**9  # the search's cap: no plan needs a micro-batch of a billion rows


def resolve_model(model: object) -> tuple[str, dict]:
    """The label and the config dict of a model.

    Args:
        model: a shipped name, a ``config.json`` path, a config dict or a ``PretrainedConfig``.

    Returns:
        ``(label, config dict)``.

    Raises:
        ValueError: an unknown name or a file that is not a config (:func:`load_config`).
    """
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model), load_config(model)
    config = config_dict(model)
    return config.get("_name_or_path") or config.get("model_type", "model"), config


def plan_finetune(
    model: object,
    memory_budget: int | str | None = None,
    seq_len: int | None = None,
    *,
    gpu: str | None = None,
    dtype: object = None,
    finetune: str = "lora",
    lora_rank: int = 16,
    lora_targets: Targets = None,
    optimizer: str = "adamw",
    attn_impl: str | None = None,
    loss: str = "standard",
    loop: str = "trainer",
    packing: bool | str = False,
    lengths: Lengths = None,
    devices: int = 1,
    sharding: str = "none",
    checkpointing: Checkpointing | bool | None = None,
    checkpoint_every: int = 1,
    micro_batch: int | None = None,
    target_tokens: int | None = None,
    gpu_memory: int | str | None = None,
    allocator: str = "default",
    dataset_size: int | None = None,
    utilisation: float | None = None,
    **memory_kwargs: object,
) -> FinetunePlan:
    """Plan a fine-tune of ``model`` on one card (per device, with ``devices`` of them).

    Args:
        model: a shipped name (``"Llama-3.1-8B"``), a ``config.json`` path, a config dict or a
            ``PretrainedConfig``.
        memory_budget: the card's memory: bytes, or a string with a unit (``"24GiB"``,
            ``"80GB"``); default: ``gpu``'s.
        seq_len: tokens per row (full rows, or the packed rows' capacity): the worst case.
        gpu: a shipped card (:data:`course_lib.hf.cards.CARDS`: its memory as torch reports
            it, its cuBLAS workspaces and CUDA context).
        dtype: the model's dtype (default: the config's); QLoRA's compute dtype.
        finetune: ``"full"``, ``"lora"`` or ``"qlora"`` (NF4 weights with double quantisation,
            ``prepare_model_for_kbit_training``, LoRA on top).
        lora_rank: LoRA's rank.
        lora_targets: ``None`` (PEFT's default for the family), ``"all-linear"`` or names.
        optimizer: one of :data:`course_lib.hf.states.OPTIMIZERS` (``"adamw"``:
            ``torch.optim.AdamW``, moments in the trained parameters' dtype).
        attn_impl: ``"sdpa"``, ``"eager"`` or ``"flash"`` (FlashAttention-2); ``None``: sdpa,
            or eager for a model sdpa cannot run at ``seq_len`` (Gemma 2's soft-capping, a
            sliding window no longer than the rows), said in ``assumed``.
        loss: ``"standard"`` (fp32 log-probabilities of the full logits) or ``"chunked"``.
        loop: ``"trainer"`` (``Trainer``: outputs dropped before backward, fused AdamW) or
            ``"plain"`` (``outputs = model(...)`` held; ``torch.optim.AdamW``'s foreach step).
        packing: ``True``/``"rows"``: rows of ``seq_len`` tokens packed from ``lengths``;
            ``"padding-free"``: micro-batches of documents end to end; the worst micro-batch
            is planned.
        lengths: the documents' lengths for packing: a shipped histogram name
            (``"wikipedia_512"``), a ``length,count`` CSV path, or a list.
        devices: data-parallel devices (the plan is per device; tokens per step count all).
        sharding: ``"none"``, ``"zero1"``, ``"zero2"``, ``"zero3"`` or ``"fsdp"``.
        checkpointing: ``"off"`` or ``"blocks"`` (``True``) to fix it; ``None``: the recipe.
        checkpoint_every: with checkpointing, every ``n``-th decoder layer.
        micro_batch: predict this micro-batch instead of searching.
        target_tokens: tokens per optimiser step to reach, or ``None``.
        gpu_memory: the old name of ``memory_budget`` (deprecated).
        allocator: ``"default"`` or ``"expandable"`` (``PYTORCH_CUDA_ALLOC_CONF=
            expandable_segments:True``): which measured reserve the device band takes.
        dataset_size: training examples (packed: documents), for the time of an epoch.
        utilisation: the share of the card's dense peak the matmuls reach, for the time
            (default: :data:`course_lib.hf.speed.MATMUL_UTILISATION`).
        **memory_kwargs: more of :func:`~course_lib.hf.memory.predict_hf_memory`'s settings
            (``weights``, ``double_quant``, ``kbit_prepare``, ``adapter_dtype``,
            ``lora_dropout``, ``foreach``, ``fused``, ``offload``, ...).

    Returns:
        :class:`FinetunePlan`; a model that does not fit is a plan with ``micro_batch == 0``
        and a warning saying why.

    Raises:
        ValueError: a bad value, naming it.
    """
    budget, card = _budget(memory_budget, gpu_memory, gpu)
    call = dict(model=model, memory_budget=budget, seq_len=seq_len, gpu=card, dtype=dtype,
                finetune=finetune, lora_rank=lora_rank, lora_targets=lora_targets,
                optimizer=optimizer, attn_impl=attn_impl, loss=loss, loop=loop, packing=packing,
                lengths=lengths, devices=devices, sharding=sharding, checkpointing=checkpointing,
                checkpoint_every=checkpoint_every, micro_batch=micro_batch,
                target_tokens=target_tokens, allocator=allocator, dataset_size=dataset_size,
                utilisation=utilisation, **memory_kwargs)  # fmt: skip
    return _plan(call)


def _plan(call: dict, advise: bool = True) -> FinetunePlan:
    """:func:`plan_finetune` on its keywords, the budget in bytes and the card's name checked
    (``advise``: when the answer is not "fits", plan each change of
    :data:`~course_lib.finetune.verdict.ADVICE` too)."""
    kw = dict(call)
    model, budget, seq_len, card = (kw.pop(k) for k in ("model", "memory_budget", "seq_len",
                                                        "gpu"))  # fmt: skip
    label, config = resolve_model(model)
    if seq_len is None:
        raise ValueError("seq_len is required: the tokens in a row (the longest)")
    positive_int("seq_len", seq_len)
    checkpointing, micro_batch = kw.pop("checkpointing"), kw.pop("micro_batch")
    fixed = None if checkpointing is None else checkpointing_mode(checkpointing)
    mode = packing_mode(kw.pop("packing"))
    names = ("finetune", "lora_rank", "lora_targets", "optimizer", "loss", "loop", "devices",
             "sharding", "checkpoint_every", "target_tokens", "allocator")  # fmt: skip
    run = Run(**{n: kw.pop(n) for n in names}, packing=mode)
    dtype, attn_impl, lengths = kw.pop("dtype"), kw.pop("attn_impl"), kw.pop("lengths")
    size, share = kw.pop("dataset_size"), kw.pop("utilisation")
    s, assumed = settings(config, seq_len, dtype, attn_impl, card, run, kw)
    pred = Predictor(config, seq_len, s, mode, lengths)
    p = FinetunePlan(label, config, seq_len, budget, card, run.target_tokens, s, assumed, pred)
    p.call = call
    if size is not None:
        p.dataset_size = positive_int("dataset_size", size)
    if share is not None:
        if not 0 < float(share) <= 1:
            raise ValueError(f"utilisation={share!r} must be in (0, 1]: a share of the peak")
        p.utilisation = float(share)
    if micro_batch is not None:
        _predict_one(p, positive_int("micro_batch", micro_batch), fixed)
    else:
        _search(p, fixed)
    p.verdict = verdict_of(p)
    if advise:
        p.advice = advice_for(p, _plan)
    describe(p)
    return p


def _budget(memory_budget: object, gpu_memory: object, gpu: str | None) -> tuple[int, str | None]:
    """The budget in bytes and the shipped card, from the three ways to say them."""
    if gpu_memory is not None:
        warnings.warn(
            "plan_finetune(gpu_memory=...) is now memory_budget=...; gpu_memory goes in a later "
            "release",
            DeprecationWarning,
            stacklevel=3,
        )
        if memory_budget is not None:
            raise ValueError("give memory_budget only (gpu_memory is its old, deprecated name)")
        memory_budget = gpu_memory
    card = card_name(gpu) if gpu is not None else None
    if memory_budget is None:
        if card is None:
            raise ValueError("give the card's memory (memory_budget='24GiB') or a gpu name")
        return card_memory(card), card
    return _checks.memory_budget(memory_budget), card


def _predict_one(p: FinetunePlan, rows: int, fixed: Checkpointing | None) -> None:
    """``micro_batch`` given: predict it (without checkpointing first, unless fixed)."""
    modes = (fixed,) if fixed else MODES
    for mode in modes:
        p.choose(mode, rows, searched=False)
        if p.fits or mode == modes[-1]:
            return


def _search(p: FinetunePlan, fixed: Checkpointing | None) -> None:
    """The largest micro-batch for each mode (checkpointed at least as many as plain), then the
    recipe's choice (module docstring)."""
    found: dict[Checkpointing, int] = {}
    for mode in (fixed,) if fixed else MODES:

        def need(rows: int, m: Checkpointing = mode) -> int:
            return p.predictor(m, rows).device_bytes

        found[mode] = _largest(need, p.memory_budget, found.get("off", 0))
    p.max_micro_batch_by_mode = found
    for mode in found:  # the band's low end: at least as many rows as at its top

        def low(rows: int, m: Checkpointing = mode) -> int:
            return p.predictor(m, rows).device_bytes_low

        p.max_micro_batch_low_by_mode[mode] = _largest(low, p.memory_budget, found[mode])
    mode = fixed or ("off" if found["off"] else "blocks")
    p.choose(mode, _accumulate(p, found[mode]) if found[mode] else 1, searched=True)


def _largest(need: Callable[[int], int], budget: int, known: int = 0) -> int:
    """The largest micro-batch whose ``need(rows)`` (bytes on the device) is within ``budget``
    (0: not even one row), ``known`` rows already known to fit.

    From two rows on every byte of the step is affine in the rows and the peak is the largest
    of such lines (:mod:`course_lib.hf.scaling`): the line through the last two fits, carried
    on, lands on the answer or just above it, and inside a bracket the secant narrows it (a
    bisection after two secant steps, so a bent curve cannot slow it). Each probe is a whole
    prediction; this takes about five where doubling then bisecting takes about ten.

    Args:
        need: the bytes on the device at a micro-batch (memoised by the caller).
        budget: the card's memory in bytes.
        known: a micro-batch already known to fit (0: none).

    Returns:
        The largest micro-batch within the budget, up to :data:`MAX_ROWS`; 0 when one row
        does not fit.
    """
    fits = [n for n in (1, 2, 3) if n <= known] or []
    for rows in (1, 2, 3):
        if rows > known:
            if need(rows) > budget:
                return rows - 1
            fits.append(rows)
    if known > 3:
        fits.append(known)
    hi, tries = 0, 0  # hi: the smallest micro-batch known not to fit (0: none yet)
    while not hi or hi - fits[-1] > 1:
        lo, prev = fits[-1], fits[-2]
        if not hi:
            slope = max(1, (need(lo) - need(prev)) // (lo - prev))
            guess = min(MAX_ROWS, max(lo + 1, lo + (budget - need(lo)) // slope))
        elif tries >= 2:
            guess = (lo + hi) // 2
        else:
            tries += 1
            rise = max(1, need(hi) - need(lo))
            guess = min(hi - 1, max(lo + 1, lo + (budget - need(lo)) * (hi - lo) // rise))
        if need(guess) > budget:
            hi = guess
        else:
            fits.append(guess)
            if guess == MAX_ROWS:
                return guess
    return fits[-1]


def _accumulate(p: FinetunePlan, m_max: int) -> int:
    """The micro-batch for ``target_tokens``: the fewest tokens per step that reach it (then the
    largest micro-batch); sets ``grad_accum_steps``. Without a target: ``m_max``, no
    accumulation."""
    if not p.target_tokens:
        p.grad_accum_steps = 1
        return m_max
    per_row = p.predictor.tokens_per_row() * p.devices
    rows = max(1, -(-p.target_tokens // max(1, int(per_row))))
    m, a = min(((m, -(-rows // m)) for m in range(1, min(m_max, rows) + 1)),
               key=lambda ma: (ma[0] * ma[1], -ma[0]))  # fmt: skip
    p.grad_accum_steps = a
    return m
