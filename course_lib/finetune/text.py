"""A :class:`~course_lib.finetune.plan.FinetunePlan` in words: the rows ``print(plan)`` shows
and the notes and warnings it carries (what was assumed, why this micro-batch, what decides,
when ``expandable_segments`` would change the answer, what to change when nothing fits),
written into the plan once its numbers are chosen (:func:`describe`). No torch here."""

from __future__ import annotations

from ..hf.arch import architecture
from ..hf.cards import HOPPER_CONTEXT, device_band
from ..hf.memory import HFMemory
from ..hf.speed import CARD_SPEED
from ..units import format_bytes as fb
from .plan import FinetunePlan

OPTIMISER_WORDS = {
    "adamw": "torch.optim.AdamW: two moments in the trained parameters' dtype",
    "adamw-mixed": "AdamW with fp32 master weights and two fp32 moments",
    "adamw-8bit": "bitsandbytes AdamW8bit: two uint8 states and a block-wise scale",
    "paged-adamw-8bit": "bitsandbytes PagedAdamW8bit: its large states in CUDA unified memory",
    "sgd": "SGD without momentum: no state",
    "sgd-momentum": "SGD with momentum: one buffer per parameter",
}


def rows(p: FinetunePlan) -> list[tuple[str, str]]:
    """The plan as ``(label, text)`` rows: the model, the settings, the bytes, the choice.

    Args:
        p: the plan.

    Returns:
        The rows, in print order.
    """
    arch, m = architecture(p.config), p._any
    out = [
        ("model", f"{p.model} ({arch.model_type}, {arch.num_hidden_layers} layers): "
                  f"{p.n_params:,} parameters in {p.dtype}"),
        ("fine-tune", _tuning(p)),
        ("optimiser", f"{p.settings.optimizer} ({OPTIMISER_WORDS[p.settings.optimizer]})"),
        ("rows", _rows_text(p)),
        ("GPU memory", f"{p.card}: {fb(p.memory_budget)} ({p.memory_budget:,} bytes, what "
                       "torch reports)" if p.card else f"{fb(p.memory_budget)} "
                       f"({p.memory_budget:,} bytes: GB = 10**9, GiB = 2**30)"),
        ("weights", fb(p.weights)),
        ("adapters", f"{fb(p.adapters)}" if p.adapters else "none"),
        ("gradients", fb(p.gradients)),
        ("optimiser state", fb(p.optimizer_state) + (f" (+ {fb(m.paged_bytes)} paged)"
                                                      if m.paged_bytes else "")),
    ]  # fmt: skip
    per_row = p.activations_per_row
    out.append(("one more row", f"+{fb(per_row['off'])} without checkpointing, "
                f"+{fb(per_row['blocks'])} with (the allocated peak)"))  # fmt: skip
    if p.searched:
        top, low = p.max_micro_batch_by_mode, p.max_micro_batch_low_by_mode
        out.append(("largest micro-batch", "; ".join(
            f"{'with' if k == 'blocks' else 'without'} checkpointing {top[k]} at the device "
            f"band's top, {low.get(k, top[k])} at its low end" for k in top)))  # fmt: skip
    out.append(("verdict", _verdict(p)))
    if not p.micro_batch:
        return out + [("plan", "nothing fits for sure (see the verdict and the warning)")]
    return out + _choice(p)


def _verdict(p: FinetunePlan) -> str:
    """The verdict in words: how sure, the band, and what would change the answer."""
    m = p._any
    rows = p.micro_batch or (m.step.batch_size if p.memory else 1)
    band = (
        f"micro-batch {rows} needs {fb(m.device_bytes_low)} to {fb(m.device_bytes)} on the "
        f"device (the band's low end and top), the card has {fb(p.memory_budget)}"
    )
    text = {
        "fits": f"fits: {band}",
        "may not fit": f"may not fit (fits at the band's low end): {band}; with the typical "
                       "reserve it fits, with the worst measured it does not",
        "does not fit": f"does not fit: {band}",
    }[p.verdict]  # fmt: skip
    if p.advice:
        text += "; it fits with " + "; or with ".join(
            f"{a['flag']} (micro-batch {a['micro_batch']})" for a in p.advice)  # fmt: skip
    return text


def _tuning(p: FinetunePlan) -> str:
    if p.lora_rank is None:
        return f"full: all {p.n_trainable:,} parameters train"
    kind = "QLoRA (NF4 weights)" if p.finetune == "qlora" else "LoRA"
    share = 100 * p.n_trainable / p.n_params
    return (f"{kind} rank {p.lora_rank} on {', '.join(p.lora_targets)}: "
            f"{p.n_trainable:,} trainable ({share:.2f}%)")  # fmt: skip


def _rows_text(p: FinetunePlan) -> str:
    s = p.settings
    text = f"{p.seq_len:,} tokens each, {p.attn_impl} attention, {s.loss} loss, {s.loop} loop"
    if p.predictor.packing:
        text += f", {p.predictor.packing} packed from the lengths (the worst micro-batch)"
    if s.devices > 1 or s.sharding != "none":
        text += f"; {s.devices} devices, sharding {s.sharding}"
    return text


def _choice(p: FinetunePlan) -> list[tuple[str, str]]:
    m, budget = p.memory, p.memory_budget
    assert m is not None
    steps = f"{p.grad_accum_steps} accumulation step{'s' * (p.grad_accum_steps > 1)}"
    every = p.settings.checkpoint_every
    ckpt = p.checkpointing + (f" (every {every}th layer)" if every > 1 and
                              p.checkpointing == "blocks" else "")  # fmt: skip
    target = f" (target {p.target_tokens:,})" if p.target_tokens else ""
    parts = sorted(p.components.items(), key=lambda kv: -kv[1])
    band = m.band
    (low, high), (c_low, c_high) = band.ratio, band.context
    where = ("measured on a T4" if p.card == "T4" else "measured after training steps on an "
             "H200" if band.context == HOPPER_CONTEXT else "published bare-context figures for "
             "current cards, lazy module loading")  # fmt: skip
    source = {"expandable": "expandable_segments, assumed", "fixed": "full rows: the T4 rows' "
              "median and highest", "varying": "rows of varying length: FSDP runs on A100s",
              "packing": "packed rows: taken as varying rows"}  # fmt: skip
    kind = "expandable" if p.settings.allocator == "expandable" else p.settings.workload
    grown, total = p.growth.get(p.decides, 0), sum(v for v in p.growth.values() if v > 0)
    share = 100 * p.components.get(p.decides, 0) / p.peak_bytes
    why = (f"+{fb(grown)} of the +{fb(total)} one more row adds to the allocated peak "
           f"({100 * grown / total:.0f}%); it is {fb(p.components.get(p.decides, 0))} now, "
           if grown > 0 else "nothing grows with one more row; the largest part, ")  # fmt: skip
    out = [
        ("plan", f"micro-batch {p.micro_batch} x {steps}, checkpointing {ckpt}"),
        ("tokens per step", f"{p.tokens_per_step:,}{target}"),
        ("allocated peak", f"{fb(p.peak_bytes)} at {p.peak_at}: "
                           + ", ".join(f"{k} {fb(v)}" for k, v in parts[:5])),
        ("on the device", f"{fb(p.device_bytes_low)} to {fb(p.device_bytes)} of {fb(budget)} "
                          f"({100 * p.device_bytes / budget:.0f}% at the top, the end the plan "
                          f"uses): {fb(band.persistent)} kept as it is (weights, adapters, "
                          f"optimiser state), the reserve x{low:.2f} to x{high:.2f} over the other "
                          f"{fb(band.fragments)} ({source[kind]}), CUDA context "
                          f"{fb(c_low)} to {fb(c_high)} ({where})"),
        ("decides", f"{p.decides}: {why}{share:.0f}% of the allocated peak"),
    ]  # fmt: skip
    if p.why_micro_batch:
        out.insert(1, ("why", p.why_micro_batch))
    return out + _time(p)


def _time(p: FinetunePlan) -> list[tuple[str, str]]:
    """The time rows: a step, tokens a second, an epoch (:mod:`course_lib.hf.speed`)."""
    t = p.step_time
    if t is None:
        return []
    half, single, bandwidth = CARD_SPEED[p.card or ""]
    f = t.flops
    work = ", ".join(f"{k} {f[k] / 1e12:,.0f}" for k in ("forward", "backward", "recompute")
                     if f.get(k))  # fmt: skip
    out = [("time per step", f"{t.total:,.2f} s on one {p.card}: {work} TFLOP at "
            f"{p.utilisation:.0%} of its {half:g} TFLOPS ({t.compute:,.2f} s), memory-bound "
            f"kernels at {bandwidth:,.0f} GB/s ({t.memory:,.2f} s), the optimiser "
            f"({t.optimizer:,.3f} s)"),
           ("tokens per second", f"{p.tokens_per_second:,.0f}" + (
               f" over {p.devices} devices (each its own step; their communication is not "
               "counted)" if p.devices > 1 else ""))]  # fmt: skip
    if p.epoch_seconds is not None:
        out.append(("time per epoch", f"{_duration(p.epoch_seconds)}: {p.steps_per_epoch:,} "
                                      f"steps over {p.dataset_size:,} examples"))  # fmt: skip
    return out


def _duration(seconds: float) -> str:
    """``1 h 23 min``, ``4 min 05 s`` or ``12.3 s``."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 60:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{seconds:.1f} s"


def describe(p: FinetunePlan) -> None:
    """Write the plan's words into it: ``p.lines`` (:func:`rows`), then ``p.notes`` and
    ``p.warnings`` (:func:`warn`).

    Args:
        p: the plan, its numbers chosen.
    """
    warn(p)
    p.lines = rows(p)


def warn(p: FinetunePlan) -> None:
    """Fill ``p.notes`` (what was assumed, the prediction's own notes) and ``p.warnings``.

    Args:
        p: the plan, its numbers chosen.
    """
    own = [n for n in p._any.notes if not n.startswith("LoRA on ")]  # said in ``assumed``
    p.notes[:] = [f"assumed {a}" for a in p.assumed] + own
    if p.attn_impl == "eager":
        p.notes.append("eager attention keeps batch x heads x seq_len^2 scores per layer; "
                       "sdpa and flash do not")  # fmt: skip
    _expandable(p)
    cap = p.capability()
    if p.attn_impl == "flash" and cap and cap < (8, 0):
        p.warnings.append(f"FlashAttention-2 needs compute capability 8.0 or newer; the "
                          f"{p.card} is {cap[0]}.{cap[1]}: use sdpa")  # fmt: skip
    one = {k: p.predictor(k, 1) for k in ("off", "blocks")}
    if not p.searched and not p.fits:
        p.warnings.append(f"micro-batch {p.micro_batch} does not fit: it needs "
                          f"{fb(p.memory.device_bytes if p.memory else 0)} on the device "
                          f"({fb(p.memory.peak_bytes if p.memory else 0)} allocated), more "
                          f"than the {fb(p.memory_budget)} of the card")  # fmt: skip
    elif not p.micro_batch:
        p.warnings.append(_nothing_fits(p, one))
    elif p.checkpointing == "blocks" and p.max_micro_batch_by_mode.get("off") == 0:
        p.warnings.append(
            f"one row of {p.seq_len:,} tokens does not fit without activation checkpointing "
            f"(it needs {fb(one['off'].device_bytes)} on the device), so the plan turns it on: "
            f"every layer's forward runs twice, {p.recompute_factor:.2f}x the operations a step"
        )


def _expandable(p: FinetunePlan) -> None:
    """Say when ``expandable_segments`` changes the answer: one more row (one row, when
    nothing fits) fits the card at the top of the expandable allocator's band."""
    if p.settings.allocator != "default":
        return
    rows = p.micro_batch + 1 if p.micro_batch else 1
    m = p.predictor(p.checkpointing, rows)
    top = device_band(m.peak_bytes, m.band.persistent, p.attn_impl, p.card,
                      p.settings.workload, "expandable").high  # fmt: skip
    if top <= p.memory_budget:
        p.notes.append(f"with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (--allocator "
                       f"expandable) micro-batch {rows} fits: {fb(top)} at the top of its band "
                       "(the default allocator's reserve decides the last row)")  # fmt: skip


def _nothing_fits(p: FinetunePlan, one: dict[str, HFMemory]) -> str:
    band = device_band(p.fixed, p.fixed, p.attn_impl, p.card,
                       p.settings.workload, p.settings.allocator)  # fmt: skip
    fixed = band.high
    if fixed >= p.memory_budget:
        return (
            f"nothing fits: the weights, adapters and optimiser state alone need {fb(fixed)} on "
            f"the device ({fb(p.fixed)} of tensors), more than the {fb(p.memory_budget)} of the "
            "card; " + ("fine-tune with LoRA or QLoRA instead, or " if p.finetune == "full"
                        else "") + "use a smaller model, or a card with more memory"
        )  # fmt: skip
    return (
        f"nothing fits: one row of {p.seq_len:,} tokens needs {fb(one['off'].device_bytes)} "
        f"on the device without activation checkpointing and {fb(one['blocks'].device_bytes)} "
        f"with it, more than the {fb(p.memory_budget)} of the card; shorten the rows"
        + (", use sdpa attention" if p.attn_impl == "eager" else "")
        + (", use the chunked loss" if p.settings.loss == "standard" else "")
        + (", fine-tune with LoRA" if p.finetune == "full" else "")
        + " or get more memory"
    )
