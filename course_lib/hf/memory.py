"""One fine-tuning step's memory per device: the fixed bytes plus the step, then the card.

:func:`predict_hf_memory` is what the plan calls: :func:`~course_lib.hf.predict.predict_hf_step`
for the step (every keyword passed through) and :mod:`~course_lib.hf.states` for the bytes that
do not depend on the batch, divided over devices as the sharding does, and
:func:`~course_lib.hf.cards.device_band` for what the card must hold (a band: the reserve over
what fragments, at both ends of its measured range, and the CUDA context).

The peak is the larger of two moments: the backward (weights, adapters, optimiser states and the
step's own peak, which counts the gradients as they are made after ``zero_grad(set_to_none=
True)``) and the optimiser step (weights, states, every gradient, the step's temporaries).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..units import DTYPE_BYTES, dtype_name
from .arch import Arch, architecture, layer_dims, parameter_dims, root_dims
from .cards import Band, cublas_workspaces, device_band
from .families import HEAD, lora_targets_for, saved_modules
from .predict import HFStepBreakdown, predict_hf_step
from .states import (
    DEEPSPEED_SUB_GROUP,
    Sharding,
    int8_bytes,
    nf4_bytes,
    optimizer_state_bytes,
    optimizer_step_bytes,
    paged_state_bytes,
    zero3_step_bytes,
)


def projections(arch: Arch) -> list[tuple[str, int, int]]:
    """``(PEFT name, in, out)`` of every projection of one layer.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.

    Returns:
        ``(PEFT name, in, out)`` per projection.
    """
    C, M, d = arch.hidden_size, arch.intermediate_size, arch.head_dim
    if arch.family == "gpt2":
        return [("c_attn", C, 3 * C), ("c_proj", C, C), ("c_fc", C, M), ("c_proj", M, C)]
    q, kv = arch.num_attention_heads * d, arch.num_key_value_heads * d
    if arch.fused:
        attn = [("qkv_proj", C, q + 2 * kv), ("o_proj", q, C)]
        return attn + [("gate_up_proj", C, 2 * M), ("down_proj", M, C)]
    attn = [("q_proj", C, q), ("k_proj", C, kv), ("v_proj", C, kv), ("o_proj", q, C)]
    return attn + [("gate_proj", C, M), ("up_proj", C, M), ("down_proj", M, C)]


# the bytes that live through the whole step, whatever the batch does
FIXED = ("weights", "adapters", "optimizer_state", "cublas_workspaces", "batch", "ddp_buckets")


@dataclass
class HFMemory:
    """Predicted bytes per device of one fine-tuning step (:func:`predict_hf_memory`).

    ``peak_bytes``: the tensors at the peak (what ``max_memory_allocated`` reports), a point;
    ``band``: what the card must hold, a range (:func:`~course_lib.hf.cards.device_band`);
    ``device_bytes`` its top (what a plan compares with the card), ``device_bytes_low`` its
    bottom, ``reserved_bytes`` the allocator's reserve at the top (``max_memory_reserved``);
    ``components``: every part's own size (name ->
    bytes: :data:`FIXED`, all the gradients, the step's parts at its peak, the optimiser
    step's temporaries); ``at_peak``: ``peak_bytes`` by part at the moment that decides it
    (``peak_at``), adding up to it; ``moments``: the two candidate peaks; ``paged_bytes``: a
    paged optimiser's states in CUDA unified memory, outside both counts (paged out to the CPU
    when the card is full).
    """

    peak_bytes: int  # allocated: the tensor count at the peak
    band: Band  # what the card must hold: the reserve and the context at both ends
    components: dict[str, int]
    peak_at: str
    step: HFStepBreakdown
    notes: list[str] = field(default_factory=list)
    moments: dict[str, int] = field(default_factory=dict)  # "backward", "optimizer.step"
    paged_bytes: int = 0
    at_peak: dict[str, int] = field(default_factory=dict)

    @property
    def device_bytes(self) -> int:
        """The band's top: what the card must hold at the peak (what a plan compares)."""
        return self.band.high

    @property
    def device_bytes_low(self) -> int:
        """The band's bottom: the reserve and the context at the low end of their ranges."""
        return self.band.low

    @property
    def reserved_bytes(self) -> int:
        """The caching allocator's reserve at the band's top (``max_memory_reserved``)."""
        return self.band.high - self.band.context[1]

    @property
    def reserved_bytes_low(self) -> int:
        """The caching allocator's reserve at the band's bottom."""
        return self.band.low - self.band.context[0]

    @property
    def decides(self) -> str:
        """The largest part of ``peak_bytes`` at the peak (``at_peak``): what to shrink first."""
        return max(self.at_peak, key=lambda k: self.at_peak[k])


def predict_hf_memory(
    config: Any, batch_size: int, seq_len: int, *, lora_rank: int | None = None,
    dtype: object = None, optimizer: str = "adamw", foreach: bool = True, devices: int = 1,
    sharding: str = "none", offload: bool = False, double_quant: bool = True,
    card: str | None = None, fused: bool = False, master_weights: object = None,
    reduce_dtype: object = None, workload: str = "fixed", allocator: str = "default",
    sub_group_size: int | None = None, **step_kwargs: Any,
) -> HFMemory:  # fmt: skip
    """Peak bytes per device of one step of a fine-tune (module docstring).

    Args:
        config: a ``PretrainedConfig`` or its dict (:func:`predict_hf_step`).
        batch_size: rows in the micro-batch.
        seq_len: tokens per row.
        lora_rank: PEFT LoRA of this rank; ``None``: a full fine-tune.
        dtype: the model's dtype (default: the config's).
        optimizer: one of :data:`~course_lib.hf.states.OPTIMIZERS` (``"adamw"``: moments in
            the parameters' dtype, as ``torch.optim.AdamW``).
        foreach: AdamW's multi-tensor step (``torch.optim.AdamW``'s default on CUDA): one copy
            of the second moment.
        devices: data-parallel ranks.
        sharding: ``"none"`` (data parallel), ``"zero1"``, ``"zero2"``, ``"zero3"``,
            ``"fsdp"`` (= ZeRO-3: states, gradients and weights divided; one layer gathered).
        offload: the optimiser states live on the CPU.
        double_quant: NF4 weights' second-level quantisation constants.
        card: a shipped card name (:data:`~course_lib.hf.cards.CARDS`), for its cuBLAS
            workspaces and CUDA context.
        fused: AdamW's fused kernel (the Trainer's default ``adamw_torch_fused``): no step
            temporaries.
        master_weights: FSDP's mixed precision (``MixedPrecisionPolicy(param_dtype=dtype)``
            in FSDP2, ``MixedPrecision`` in FSDP1, what accelerate and the Trainer run with
            ``bf16``): the parameters, their sharded gradients and the optimiser's moments in
            this dtype (``"float32"``), the step and each gathered layer in ``dtype``.
            ``None``: the parameters are in ``dtype``. A full fine-tune under ``"fsdp"`` /
            ``"zero3"`` only (:func:`_mixed_precision`).
        reduce_dtype: with ``master_weights``, the dtype gradients are reduce-scattered in
            (``None``: ``dtype``, FSDP2's default).
        workload: ``"fixed"`` rows, ``"varying"`` rows or ``"packing"``: which measured
            reserve the band takes (:mod:`~course_lib.hf.cards`).
        allocator: ``"default"`` or ``"expandable"`` (``expandable_segments:True``).
        sub_group_size: ``"zero3"`` with ``"adamw-mixed"``: DeepSpeed's ``sub_group_size``,
            the elements its step casts to fp32 at once (``None``: its default, 1e9).
        **step_kwargs: passed to :func:`predict_hf_step` (``attn_impl``, ``lora_targets``,
            ``weights``, ``loss``, ``loop``, ``device`` (default ``"cuda"``), ...).

    Returns:
        :class:`HFMemory`.

    Raises:
        ValueError: a bad value (naming it), as :func:`predict_hf_step`.
    """
    shard = Sharding(devices, sharding, offload)  # checks both first
    step_kwargs.setdefault("device", "cuda")
    step = predict_hf_step(
        config, batch_size, seq_len, lora_rank=lora_rank, dtype=dtype, **step_kwargs
    )
    arch = architecture(config)
    b = DTYPE_BYTES[dtype_name(step.dtype)]
    weights = step_kwargs.get("weights", "16bit")
    upcast = step_kwargs.get("kbit_prepare")
    upcast = weights != "16bit" if upcast is None else upcast
    master_b, reduce_b = _mixed_precision(master_weights, reduce_dtype, b, lora_rank, shard,
                                          optimizer, weights)  # fmt: skip
    stored = _stored_weights(arch, weights, 4 if upcast else b, master_b, double_quant, shard)
    groups = _trained_groups(arch, lora_rank, master_b, 4 if upcast else b, step_kwargs)
    mine = [(shard.state_shapes(dims), e) for dims, e in groups]
    states, paged = _states(mine, optimizer, offload)
    every = sum(r * k * e for dims, e in groups for r, k in dims)  # every trained gradient
    c = {"weights": stored,
         "adapters": 0 if lora_rank is None else sum(sum(shard.local(d)) * e for d, e in groups),
         "optimizer_state": states - paged,
         "gradients": sum(shard.gradients(dims, e) for dims, e in groups),
         "activations": step.activations,
         "logits_and_loss": step.logits_and_loss, "transient": step.transient,
         "gathered": _gathered(arch, shard, b, b if lora_rank is None else 0,
                               _in_a_layers_backward(step.peak_at), reduce_b),
         # torch.optim groups its tensors by dtype and steps one group at a time
         "optimizer_step": _step_bytes(mine, optimizer, foreach, fused, shard, b,
                                       sub_group_size),
         "cublas_workspaces": cublas_workspaces(card) if step.settings["device"] == "cuda" else 0,
         "batch": 2 * batch_size * seq_len * 8,  # input_ids and labels, int64
         "ddp_buckets": shard.ddp_buckets(every)}  # fmt: skip
    held = _held_by_plain_loop(step, arch, batch_size * seq_len, 4 if upcast else b)
    # the step counts the gradients it makes in the compute dtype (an adapter's in its own)
    made = every if lora_rank is not None else sum(r * k for r, k in groups[0][0]) * b
    # the device band at a peak: the reserve over what fragments (not what persists), context
    persistent = c["weights"] + c["adapters"] + c["optimizer_state"]
    band = partial(device_band, persistent=persistent, attn_impl=step.attn_impl, card=card,
                   workload=workload, allocator=allocator)  # fmt: skip
    return _at_the_peak(c, step, made, held, offload, paged, band)


def _at_the_peak(
    c: dict[str, int], step: HFStepBreakdown, grads: int, held: int, offload: bool, paged: int,
    band: Callable[[int], Band],
) -> HFMemory:  # fmt: skip
    """The larger of the two moments (module docstring), as :class:`HFMemory`, with the parts
    of the moment that decides (``at_peak``, adding up to ``peak_bytes``) and ``band(peak)``;
    ``grads``: the bytes of every gradient the step makes, as it makes them."""
    fixed = {k: c[k] for k in FIXED}
    # the gradients made by the backward's peak, as this rank keeps them (its share, sharded)
    made = step.gradients * c["gradients"] // grads if grads else 0
    moment = {
        "activations": step.activations,
        "logits_and_loss": step.logits_and_loss,
        "transient": step.transient,
        "gradients": made,
        "gathered": c["gathered"],
    }
    # The plain loop's ``outputs`` outlive the backward and are still referenced while the
    # optimiser steps: the logits (in the head's dtype), and, through ``outputs.loss.grad_fn``,
    # the graph's nodes (their saved tensors are freed, the nodes are not). With LoRA and
    # checkpointing, ``enable_input_require_grads`` made the embeddings' output a leaf: its
    # ``AccumulateGrad`` node keeps it, and its ``.grad``, alive.
    stepping = {
        "gradients": c["gradients"],
        "held_outputs": held,
        "optimizer_step": 0 if offload else c["optimizer_step"],
    }
    backward, opt_step = (
        sum(fixed.values()) + sum(moment.values()),
        sum(fixed.values()) + sum(stepping.values()),
    )
    notes = list(step.notes)
    if paged:
        notes.append(
            f"paged 8-bit states ({paged:,} bytes) live in CUDA unified memory, "
            "outside the allocator's count, paged out to the CPU when the card is full"
        )
    peak, at, parts = (backward, step.peak_at, moment) if backward >= opt_step else (
        opt_step, "optimizer.step", stepping)  # fmt: skip
    return HFMemory(
        peak, band(peak), c, at, step, notes,
        {"backward": backward, "optimizer.step": opt_step}, paged,
        {k: v for k, v in {**fixed, **parts}.items() if v},
    )  # fmt: skip


def _in_a_layers_backward(peak_at: str) -> bool:
    """Is the step's peak inside a decoder layer's backward (where FSDP holds the layer's
    unsharded gradients), rather than in the forward or the loss?"""
    return "layers." in peak_at and "(forward)" not in peak_at


def _gathered(
    arch: Arch, shard: Sharding, b: int, grad_b: int, in_backward: bool, reduce_b: int
) -> int:
    """What a sharded step gathers at once (:meth:`Sharding.gathered`): the root parameters
    and a layer's weights in the compute dtype (``b`` bytes), and, when the peak is in a
    layer's backward of a full fine-tune, the layer's unsharded gradients (``grad_b`` 0:
    adapters only) and its reduce-scatter input (``reduce_b`` bytes an element)."""
    layer_n = sum(r * c for r, c in layer_dims(arch))
    root_w = sum(r * c for r, c in root_dims(arch)) * b
    module = max(r * c for r, c in root_dims(arch)) * b
    if not in_backward or not grad_b:
        return shard.gathered(root_w, layer_n * b, 0, root_module_bytes=module)
    return shard.gathered(root_w, layer_n * b, layer_n * grad_b, layer_n * reduce_b, module)


def _mixed_precision(
    master: object, reduce: object, b: int, lora_rank: int | None, shard: Sharding,
    optimizer: str, weights: str,
) -> tuple[int, int]:  # fmt: skip
    """Bytes an element of the parameters (and their gradients and states) and of the
    reduce-scatter input: FSDP's mixed precision keeps fp32 parameters sharded and computes
    in the model's dtype (``b`` bytes); without it both are ``b``.

    Raises:
        ValueError: master weights outside a sharded full fine-tune of 16-bit weights, or
            beside ``adamw-mixed`` (which already keeps its own fp32 copy).
    """
    if master is None:
        if reduce is not None:
            raise ValueError("reduce_dtype needs master_weights (FSDP's mixed precision)")
        return b, b
    if shard.mode not in ("fsdp", "zero3"):
        raise ValueError(
            f"master_weights={master!r} is FSDP's mixed precision: it needs sharding='fsdp' "
            f"or 'zero3', not {shard.mode!r} (DeepSpeed's bf16 ZeRO-1/2 is "
            "optimizer='adamw-mixed')"
        )
    if lora_rank is not None or weights != "16bit":
        raise ValueError("master_weights applies to a full fine-tune of 16-bit weights")
    if optimizer == "adamw-mixed":
        raise ValueError("master_weights and optimizer='adamw-mixed' both add fp32 masters")
    reduce_b = b if reduce is None else DTYPE_BYTES[dtype_name(reduce)]
    return DTYPE_BYTES[dtype_name(master)], reduce_b


def _stored_weights(
    arch: Arch, weights: str, other_b: int, b: int, double_quant: bool, shard: Sharding
) -> int:
    """This rank's stored weights: 16-bit tensors as sharded, or 4/8-bit projections (split
    evenly) beside the other weights in ``other_b`` bytes (fp32 after kbit preparation)."""
    dims = parameter_dims(arch)
    if weights == "16bit":
        return sum(shard.local(dims)) * b
    L, proj = arch.num_hidden_layers, projections(arch)
    rest = sum(r * c for r, c in dims) - L * sum(i * o for _, i, o in proj)
    if weights == "nf4":
        quant = L * sum(nf4_bytes(i * o, double_quant) for _, i, o in proj)
    else:
        quant = L * sum(int8_bytes(i, o) for _, i, o in proj)
    return shard.weights(quant + rest * other_b)


def _trained_groups(
    arch: Arch, lora_rank: int | None, b: int, copy_b: int, step_kwargs: dict
) -> list[tuple[list[tuple[int, int]], int]]:
    """The trained tensors' ``(rows, row length)`` by element size: every parameter (``b``
    bytes), or the LoRA adapters (``A``: rank x in, ``B``: out x rank) of the targeted
    projections and the head (the adapter's dtype), and PEFT's ``modules_to_save`` copies of
    the embedding and the head (``copy_b``: the weights' dtype, fp32 after kbit preparation)."""
    if lora_rank is None:
        return [(parameter_dims(arch), b)]
    targets = set(lora_targets_for(arch, step_kwargs.get("lora_targets")))
    pairs = [((lora_rank, i), (o, lora_rank)) for name, i, o in projections(arch)
             if name in targets] * arch.num_hidden_layers  # fmt: skip
    C, V = arch.hidden_size, arch.vocab_size
    if HEAD in targets:
        pairs.append(((lora_rank, C), (V, lora_rank)))
    adapter_b = DTYPE_BYTES[dtype_name(step_kwargs.get("adapter_dtype") or "float32")]
    groups = [([d for pair in pairs for d in pair], adapter_b)]
    copies = saved_modules(arch, step_kwargs.get("modules_to_save"))
    if copies:
        groups.append(([(V, C)] * len(copies), copy_b))
    return groups


def _step_bytes(
    mine: list[tuple[list[int], int]], optimizer: str, foreach: bool, fused: bool,
    shard: Sharding, b: int, sub_group_size: int | None,
) -> int:  # fmt: skip
    """The optimiser step's temporaries on this rank: ``torch.optim`` steps one dtype's
    tensors at a time; DeepSpeed's ZeRO-3 with fp32 masters one sub-group at a time."""
    if shard.mode == "zero3" and optimizer == "adamw-mixed":
        shapes = [n for group, _ in mine for n in group]
        return zero3_step_bytes(shapes, b, sub_group_size or DEEPSPEED_SUB_GROUP)
    return max(optimizer_step_bytes(shapes, optimizer, e, foreach, fused) for shapes, e in mine)


def _states(mine: list[tuple[list[int], int]], optimizer: str, offload: bool) -> tuple[int, int]:
    """The optimiser's states on this rank and the paged part of them: ``torch.optim`` keeps
    its moments in each tensor's dtype; bitsandbytes' 8-bit states do not depend on it (and its
    two quantisation maps are shared once)."""
    if offload:
        return 0, 0
    every = [n for shapes, _ in mine for n in shapes]
    paged = paged_state_bytes(every, optimizer)
    if optimizer in ("adamw-8bit", "paged-adamw-8bit"):
        return optimizer_state_bytes(every, optimizer, 4), paged
    return sum(optimizer_state_bytes(shapes, optimizer, e) for shapes, e in mine), paged


def trainable_parameters(
    config: Any, lora_rank: int | None = None, lora_targets: str | list | tuple | None = None,
    modules_to_save: str | list | tuple | None = None,
) -> int:  # fmt: skip
    """The parameters a fine-tune trains.

    Args:
        config: a ``PretrainedConfig`` or its dict.
        lora_rank: LoRA's rank; ``None``: a full fine-tune (every parameter).
        lora_targets: as :func:`predict_hf_step` (``None``: PEFT's default for the family).
        modules_to_save: PEFT's trainable copies (:func:`predict_hf_step`).

    Returns:
        The count (a tied embedding once; LoRA: ``rank x (in + out)`` per adapted projection,
        and every parameter of a saved module's copy).

    Raises:
        ValueError: an unsupported config or LoRA target.
    """
    kw = {"lora_targets": lora_targets, "modules_to_save": modules_to_save}
    groups = _trained_groups(architecture(config), lora_rank, 4, 4, kw)
    return sum(r * c for dims, _ in groups for r, c in dims)


def _held_by_plain_loop(step: HFStepBreakdown, arch: Arch, tokens: int, e: int) -> int:
    """What a plain loop's ``outputs`` still hold while the optimiser steps (comment above):
    the logits in the head's dtype (``e`` bytes), and with LoRA and checkpointing the
    embeddings' output leaf and its gradient."""
    if step.settings["loop"] != "plain":
        return 0
    held = tokens * arch.vocab_size * e if step.settings["loss"] == "standard" else 0
    if step.lora_rank is not None and step.checkpointing == "blocks":
        held += 2 * tokens * arch.hidden_size * e
    return held
