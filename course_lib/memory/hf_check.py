"""Predicted beside measured for Hugging Face models: tiny random copies of each family.

:func:`tiny_hf_config` builds a small config of a supported family locally (no download;
grouped-query attention where the family has it), :func:`build_model` instantiates it the way a
fine-tune would run (``model.train()``, PEFT LoRA on every attention and MLP projection,
``activation_checkpointing_enable()``), and :func:`compare_hf` runs one real training step per
shape under :func:`~course_lib.memory.meter.measure_step` beside
:func:`~course_lib.hf.predict.predict_hf_step`. Needs the ``hf`` extra (``transformers``;
``peft`` for LoRA).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

from .._checks import Checkpointing, checkpointing_mode
from ..batch import random_batch
from ..hf.arch import architecture
from ..hf.families import lora_targets_for
from ..hf.predict import predict_hf_step
from ..hf.tiny import CLASSES, TINY
from ..units import dtype_name
from .meter import Device, LiveBytesTracker, measure, pick_device, training_step


def tiny_hf_config(model_type: str, **overrides: Any) -> Any:
    """A small ``transformers`` config of ``model_type`` (:data:`TINY`, then ``overrides``).

    Args:
        model_type: a family's ``model_type`` (``"llama"``, ``"qwen3"``, ``"gemma2"``, ...).
        **overrides: config fields to change (``num_hidden_layers=4``, ``vocab_size=512``).

    Returns:
        A ``transformers`` ``PretrainedConfig`` of that family: a few layers and narrow widths, so a
        training step runs in seconds on a CPU.

    Raises:
        KeyError: a model type without a tiny config (one of :data:`TINY`'s keys).
    """
    import transformers

    return getattr(transformers, CLASSES[model_type])(**{**TINY[model_type], **overrides})


def build_model(
    config: Any,
    *,
    dtype: torch.dtype,
    attn_impl: str,
    lora_rank: int | None = None,
    checkpointing: Checkpointing | bool = "off",
    seed: int = 0,
    lora_targets: str | list[str] | tuple[str, ...] | None = None,
    lora_dropout: float = 0.0,
    weights: str = "16bit",
    adapter_dtype: object = "float32",
    device: str = "cpu",
    modules_to_save: list[str] | None = None,
    reentrant: bool = False,
) -> Any:
    """A random model from ``config`` in ``dtype`` and training mode, as a fine-tune runs it:
    PEFT LoRA on ``lora_targets`` (``None``: PEFT's default for the family), 4/8-bit frozen
    weights through bitsandbytes with ``prepare_model_for_kbit_training`` (the QLoRA recipe).

    Args:
        config: a ``transformers`` config (e.g. from :func:`tiny_hf_config`).
        dtype: the weights' dtype (with 4/8-bit weights, the compute dtype).
        attn_impl: ``"eager"`` or ``"sdpa"``: transformers' ``attn_implementation``.
        lora_rank: LoRA's rank ``r`` (``lora_alpha = 2r``); ``None`` trains every weight.
        checkpointing: ``"blocks"`` (or True) turns on activation checkpointing per decoder layer.
        seed: the random weights' seed (the caller's RNG untouched).
        lora_targets: module names LoRA wraps, or a preset name.
        lora_dropout: LoRA's dropout probability.
        weights: ``"16bit"``, ``"int8"`` or ``"nf4"`` (frozen quantised base weights).
        adapter_dtype: ``"float32"`` (PEFT's autocast) or the model's dtype.
        modules_to_save: PEFT's ``modules_to_save`` (trainable copies beside LoRA).
        reentrant: checkpoint with ``use_reentrant=True`` (transformers 4's default).
        device: where the weights are made. ``"cpu"`` builds in fp32 and casts (the CPU
            checks' path); any other device (``"cuda"``) makes every 16-bit weight there in
            ``dtype`` at once, as loading a checkpoint does, so no fp32 copy passes through
            the card's allocator (16-bit weights only).

    Returns:
        The model (a ``peft`` model with LoRA) in training mode, on ``device``.

    Raises:
        AssertionError: transformers picked another attention path than ``attn_impl``, or
            made a weight in another dtype than ``dtype`` (``device`` other than the CPU).
        ValueError: quantised ``weights`` asked for on a device other than the CPU.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _random_weights(config, dtype, attn_impl, device, weights)
    if model.config._attn_implementation != attn_impl:
        raise AssertionError(
            f"asked for {attn_impl} attention, got {model.config._attn_implementation}"
        )
    if weights != "16bit":
        import peft

        model = peft.prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if checkpointing_mode(checkpointing) == "blocks":
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5
            model.activation_checkpointing_enable({"use_reentrant": reentrant})
        else:  # transformers 4: the same, spelled out
            kwargs = {"use_reentrant": reentrant}
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            model.enable_input_require_grads()
    if lora_rank is not None:
        import peft

        targets = list(lora_targets_for(architecture(config), lora_targets))
        lora = peft.LoraConfig(
            r=lora_rank,
            lora_alpha=2 * lora_rank,
            lora_dropout=lora_dropout,
            task_type="CAUSAL_LM",
            target_modules=targets,
            fan_in_fan_out=config.model_type == "gpt2",  # Conv1D
            modules_to_save=modules_to_save,
        )
        # PEFT casts 16-bit adapters to fp32 unless told not to (autocast_adapter_dtype)
        keep = dtype_name(adapter_dtype or "float32") != "float32"
        model = peft.get_peft_model(model, lora, autocast_adapter_dtype=not keep)
    return model.train()


def _random_weights(
    config: Any, dtype: torch.dtype, attn_impl: str, device: str, weights: str
) -> Any:
    """The bare model of :func:`build_model`, its weights drawn from the current seed."""
    import transformers

    auto = transformers.AutoModelForCausalLM
    if device == "cpu":
        model = auto.from_config(config, attn_implementation=attn_impl).to(dtype)
        return model if weights == "16bit" else _quantise(model, weights, dtype)
    if weights != "16bit":
        raise ValueError(f"weights={weights!r} are built on the CPU only (device='cpu')")
    # dtype= wins over the config's own (gemma-2-2b's says float32): every weight is made in
    # ``dtype`` on the device, and nothing in fp32 passes through its allocator
    with torch.device(device):
        model = auto.from_config(config, attn_implementation=attn_impl, dtype=dtype)
    if stray := {p.dtype for p in model.parameters()} - {dtype}:
        raise AssertionError(f"asked for {dtype} weights, some were made in {stray}")
    return model


def _quantise(model: Any, weights: str, dtype: torch.dtype) -> Any:
    """Swap every projection but the head for bitsandbytes' ``Linear4bit`` (NF4, double
    quantisation) or ``Linear8bitLt``, on the CPU."""
    import bitsandbytes as bnb

    for _name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if not isinstance(child, torch.nn.Linear) or child_name == "lm_head":
                continue
            new: torch.nn.Module
            if weights == "nf4":
                new = bnb.nn.Linear4bit(
                    child.in_features,
                    child.out_features,
                    bias=child.bias is not None,
                    compute_dtype=dtype,
                    compress_statistics=True,
                    quant_type="nf4",
                )
                new.weight = bnb.nn.Params4bit(
                    child.weight.data,
                    requires_grad=False,
                    quant_type="nf4",
                    compress_statistics=True,
                )
            else:
                new = bnb.nn.Linear8bitLt(
                    child.in_features,
                    child.out_features,
                    bias=child.bias is not None,
                    has_fp16_weights=False,
                )
                new.weight = bnb.nn.Int8Params(
                    child.weight.data, requires_grad=False, has_fp16_weights=False
                )
            if child.bias is not None:
                new.bias = child.bias
            setattr(module, child_name, new.to("cpu"))
    model.is_loaded_in_4bit = weights == "nf4"
    model.is_loaded_in_8bit = weights == "int8"
    return model


@dataclass
class HFComparison:
    """One training step of a tiny model, predicted beside measured (bytes)."""

    model_type: str
    dtype: str
    attn_impl: str
    lora_rank: int | None
    checkpointing: Checkpointing
    batch_size: int
    seq_len: int
    predicted: int
    measured: int
    predicted_saved: int
    measured_saved: int
    peak_at: str
    method: str
    counted: int = 0  # the exact count (on a GPU beside the allocator's peak)

    @property
    def error(self) -> float:
        """``predicted / measured - 1``."""
        return self.predicted / self.measured - 1

    @property
    def label(self) -> str:
        """The setting, as the benchmark's table prints it."""
        lora = f"LoRA r={self.lora_rank}" if self.lora_rank else "full"
        return f"{self.dtype} {self.attn_impl} {lora} checkpointing={self.checkpointing}"


BUILD_KEYS = (
    "lora_targets", "lora_dropout", "weights", "adapter_dtype", "modules_to_save", "reentrant",
)  # fmt: skip


def _step(model: Any, batch: dict, loop: str) -> float:
    """One training step: ``"trainer"`` drops the outputs before backward, ``"plain"`` holds
    them (``outputs = model(...)``; ``outputs.loss.backward()``)."""
    if loop == "plain":
        outputs = model(**batch)
        outputs.loss.backward()
        return float(outputs.loss.detach())
    return training_step(model, batch)


def every_nth(model: Any, n: int) -> None:
    """Keep checkpointing on decoder layers 0, n, 2n... only.

    Args:
        model: a model built with checkpointing on every decoder layer.
        n: the stride: layers whose index is not a multiple of ``n`` stop checkpointing.
    """
    for i, layer in enumerate(_layers(model)):
        if i % n:
            layer.gradient_checkpointing = False


def _layers(model: Any) -> Iterator[Any]:
    for module in model.modules():
        if type(module).__name__.endswith(("DecoderLayer", "Block")) and hasattr(
            module, "gradient_checkpointing"
        ):
            yield module


def compare_hf(
    config: Any, shapes: Iterable[tuple[int, int]], *, dtype: torch.dtype, attn_impl: str,
    lora_rank: int | None = None, checkpointing: Checkpointing | bool = "off",
    device: Device = None, seed: int = 0, loop: str = "trainer", checkpoint_every: int = 1,
    **settings: Any,
) -> list[HFComparison]:  # fmt: skip
    """Measure one step per ``(batch_size, seq_len)`` in ``shapes`` beside the prediction;
    ``settings`` are :func:`~course_lib.hf.predict.predict_hf_step`'s keywords.

    Args:
        config: a ``transformers`` config.
        shapes: ``(batch_size, seq_len)`` pairs, in tokens; one measured step each.
        dtype: the model's dtype.
        attn_impl: ``"eager"`` or ``"sdpa"``.
        lora_rank: LoRA's rank; ``None`` trains every weight.
        checkpointing: ``"off"`` or ``"blocks"``.
        device: where the steps run (default: CUDA when available, else the CPU).
        seed: the weights' and the batches' seed.
        loop: ``"trainer"`` (outputs dropped before backward) or ``"plain"`` (outputs held).
        checkpoint_every: checkpoint decoder layers ``0, k, 2k, ...`` only.
        **settings: :func:`~course_lib.hf.predict.predict_hf_step`'s other keywords; the build
            ones (``lora_targets``, ``lora_dropout``, ``weights``) also shape the model.

    Returns:
        One :class:`HFComparison` per shape, in order: predicted and measured peak and saved
        bytes, and the moment the prediction peaks at.
    """
    dev = pick_device(device)
    build = {k: settings[k] for k in BUILD_KEYS if k in settings}
    common: dict[str, Any] = dict(
        attn_impl=attn_impl, lora_rank=lora_rank, checkpointing=checkpointing
    )
    model = build_model(config, dtype=dtype, seed=seed, **common, **build).to(dev)
    if checkpoint_every > 1:
        every_nth(model, checkpoint_every)
    rows = []
    for batch_size, seq_len in shapes:
        batch: dict[str, Any] = random_batch(config.vocab_size, batch_size, seq_len, seed, dev)
        batch["use_cache"] = False
        model.zero_grad(set_to_none=True)
        try:
            report = measure(partial(_step, model, batch, loop), device=dev)
        finally:
            model.zero_grad(set_to_none=True)
        p = predict_hf_step(config, batch_size, seq_len, dtype=dtype, loop=loop,
                            checkpoint_every=checkpoint_every, **common, **settings)  # fmt: skip
        rows.append(HFComparison(
            config.model_type, p.dtype, attn_impl, lora_rank, p.checkpointing, batch_size,
            seq_len, p.total, report.peak_bytes, p.saved_total, report.saved_bytes, p.peak_at,
            report.method, report.counted_peak_bytes,
        ))  # fmt: skip
    return rows


def saved_by_module(model: Any, batch: dict) -> dict[str, int]:
    """Bytes autograd saves in one forward pass, by the module that made each tensor (a
    checkpointed layer's own input: ``"<layer>:input"``), the measured side of
    ``HFStepBreakdown.saved``: which module's tensors moved.

    Args:
        model: a ``transformers`` model in training mode.
        batch: its keyword arguments (``input_ids``, ``labels``, ...).

    Returns:
        ``{module name: bytes}`` of the storages autograd saved, each counted once; ``""`` is
        the top level.
    """
    stack, seen, made, out = [""], set(), {}, dict[str, int]()

    def enter(module, args, name):
        stack.append(name)

    def leave(module, args, output):
        stack.pop()

    hooks = []
    for name, module in model.named_modules():
        hooks.append(module.register_forward_pre_hook(lambda m, a, n=name: enter(m, a, n)))
        hooks.append(module.register_forward_hook(leave))

    class Maker(LiveBytesTracker):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            before = set(self._live)  # storage addresses are reused: note only new ones
            out = super().__torch_dispatch__(func, types, args, kwargs)
            for key in set(self._live) - before:
                made[key] = stack[-1]
            return out

    tracker = Maker()

    def pack(t: torch.Tensor):
        key = t.untyped_storage()._cdata
        if tracker.is_tracked(t) and key not in seen:
            seen.add(key)
            where = made.get(key, "")
            if where != stack[-1] and stack[-1].split(".")[-1].isdigit():
                where = stack[-1] + ":input"  # saved by the checkpointed layer itself
            out[where] = out.get(where, 0) + t.untyped_storage().nbytes()
        return t

    try:
        with tracker, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(**batch)
    finally:
        for h in hooks:
            h.remove()
    return out
