"""Predicted beside measured for Hugging Face models: tiny random copies of each family.

:func:`tiny_hf_config` builds a small config of a supported family locally (no download; grouped-
query attention where the family has it), :func:`build_model` instantiates it the way a
fine-tune would run (``model.train()``, PEFT LoRA on every attention and MLP projection,
``activation_checkpointing_enable()``), and :func:`compare_hf` runs one real training step per
shape under :func:`~course_lib.memory.meter.measure_step` beside
:func:`~course_lib.hf.predict.predict_hf_step`. Needs the ``hf`` extra (``transformers``;
``peft`` for LoRA).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from .._checks import Checkpointing, checkpointing_mode
from ..batch import random_batch
from ..hf.predict import predict_hf_step
from .meter import Device, LiveBytesTracker, measure_step, pick_device

# Small enough to measure in milliseconds, shaped like the real thing: GQA (or MQA), tied and
# untied embeddings, a head_dim that is not hidden / heads where the family allows it.
TINY: dict[str, dict[str, Any]] = {
    "llama": dict(hidden_size=64, intermediate_size=96, num_attention_heads=4,
                  num_key_value_heads=1, num_hidden_layers=2, vocab_size=300),
    "mistral": dict(hidden_size=96, intermediate_size=160, num_attention_heads=6,
                    num_key_value_heads=2, num_hidden_layers=3, vocab_size=200,
                    sliding_window=None),
    "qwen2": dict(hidden_size=128, intermediate_size=192, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=16, num_hidden_layers=2, vocab_size=256,
                  tie_word_embeddings=True),
    "gpt2": dict(n_embd=64, n_head=4, n_layer=3, vocab_size=256, n_positions=256,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
}  # fmt: skip
LORA_TARGETS = {
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
}


def tiny_hf_config(model_type: str, **overrides: Any) -> Any:
    """A small ``transformers`` config of ``model_type`` (:data:`TINY`, then ``overrides``).

    Raises:
        KeyError: a model type without a tiny config (one of :data:`TINY`'s keys).
    """
    import transformers

    classes = {
        "llama": transformers.LlamaConfig,
        "mistral": transformers.MistralConfig,
        "qwen2": transformers.Qwen2Config,
        "gpt2": transformers.GPT2Config,
    }
    return classes[model_type](**{**TINY[model_type], **overrides})


def build_model(
    config: Any, *, dtype: torch.dtype, attn_impl: str, lora_rank: int | None = None,
    checkpointing: Checkpointing | bool = "off", seed: int = 0,
) -> Any:  # fmt: skip
    """A random model from ``config`` in ``dtype`` and training mode, as a fine-tune runs it.

    Raises:
        AssertionError: transformers picked another attention path than ``attn_impl``.
    """
    import transformers

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        auto = transformers.AutoModelForCausalLM
        model = auto.from_config(config, attn_implementation=attn_impl).to(dtype)
    if model.config._attn_implementation != attn_impl:
        raise AssertionError(
            f"asked for {attn_impl} attention, got {model.config._attn_implementation}"
        )
    if checkpointing_mode(checkpointing) == "blocks":
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5
            model.activation_checkpointing_enable()
        else:  # transformers 4: the same, spelled out
            kwargs = {"use_reentrant": False}
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            model.enable_input_require_grads()
    if lora_rank is not None:
        import peft

        family = "gpt2" if config.model_type == "gpt2" else "llama"
        lora = peft.LoraConfig(
            r=lora_rank, lora_alpha=2 * lora_rank, lora_dropout=0.0, task_type="CAUSAL_LM",
            target_modules=LORA_TARGETS[family], fan_in_fan_out=family == "gpt2",  # Conv1D
        )  # fmt: skip
        model = peft.get_peft_model(model, lora)
    return model.train()


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
        lora = f"LoRA r={self.lora_rank}" if self.lora_rank else "full"
        return f"{self.dtype} {self.attn_impl} {lora} checkpointing={self.checkpointing}"


def compare_hf(
    config: Any, shapes: Iterable[tuple[int, int]], *, dtype: torch.dtype, attn_impl: str,
    lora_rank: int | None = None, checkpointing: Checkpointing | bool = "off",
    device: Device = None, seed: int = 0,
) -> list[HFComparison]:  # fmt: skip
    """Measure one step per ``(batch_size, seq_len)`` in ``shapes`` beside the prediction."""
    dev = pick_device(device)
    model = build_model(
        config, dtype=dtype, attn_impl=attn_impl, lora_rank=lora_rank,
        checkpointing=checkpointing, seed=seed,
    ).to(dev)  # fmt: skip
    rows = []
    for batch_size, seq_len in shapes:
        batch: dict[str, Any] = random_batch(config.vocab_size, batch_size, seq_len, seed, dev)
        batch["use_cache"] = False
        report = measure_step(model, batch, device=dev)
        p = predict_hf_step(
            config, batch_size, seq_len, attn_impl=attn_impl, dtype=dtype,
            lora_rank=lora_rank, checkpointing=checkpointing,
        )  # fmt: skip
        rows.append(
            HFComparison(
                config.model_type,
                p.dtype,
                attn_impl,
                lora_rank,
                p.checkpointing,
                batch_size,
                seq_len,
                p.total,
                report.peak_bytes,
                p.saved_total,
                report.saved_bytes,
                p.peak_at,
                report.method,
                report.counted_peak_bytes,
            )  # fmt: skip
        )
    return rows


def saved_by_module(model: Any, batch: dict) -> dict[str, int]:
    """Bytes autograd saves in one forward pass, by the module that made each tensor (a
    checkpointed layer's own input: ``"<layer>:input"``), the measured side of
    ``HFStepBreakdown.saved``: which module's tensors moved."""
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
