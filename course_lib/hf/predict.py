"""The memory model carried to real Hugging Face architectures: one training step's peak, predicted.

:func:`predict_hf_step` reads a ``transformers`` config (a ``PretrainedConfig`` or its dict:
``llama``, ``mistral``, ``qwen2``, ``gpt2``) and predicts the peak bytes, above the parameters, of
``model(input_ids=..., labels=..., use_cache=False).loss.backward()`` after
``zero_grad(set_to_none=True)``: what the forward keeps for backward, the gradients made so far,
the backward's buffers in flight, and the loss's fp32 log-probabilities.

How: :mod:`~course_lib.hf.models` writes the step as the autograd nodes the installed stack
creates (what each saves, what each backward allocates, read from the ``transformers``, ``peft``
and PyTorch sources and checked op by op against the meter), and
:mod:`~course_lib.hf.tape` replays PyTorch's rules for when each tensor is freed. The
prediction is exact by construction where the recipe is: on tiny models of every family it matches
the CPU meter to the byte (``tests/library/test_hf_memory.py``). Assumed: full rows (no padding), no
dropout (fine-tuning usually turns it off; GPT-2's config says 0.1), LoRA via PEFT with its
defaults (adapters kept in fp32, ``lora_dropout=0``), checkpointing as
``model.activation_checkpointing_enable()`` does it (every layer, non-reentrant).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._checks import Checkpointing, checkpointing_mode, one_of, positive_int
from ..units import DTYPE_BYTES, dtype_name
from .arch import Arch, StepSpec, architecture, config_dict
from .models import record_step
from .replay import replay

CHECKED_WITH = "transformers 5.24, peft 0.21, torch 2.13 (CPU)"  # where the recipes were read


def notes_for(config: Any, seq_len: int) -> list[str]:
    """What the prediction assumes that this config says otherwise.

    Raises:
        ValueError: where the difference is too large to pass over (a sliding window shorter
            than ``seq_len``).
    """
    c = config_dict(config)
    window = c.get("sliding_window")
    sliding = window is not None and (c.get("model_type") != "qwen2" or c.get("use_sliding_window"))
    if sliding and window is not None and seq_len > window:
        raise ValueError(
            f"sliding-window attention over {window} tokens, shorter than seq_len={seq_len}, is "
            "not modelled (its mask changes what attention keeps); use seq_len <= sliding_window"
        )
    drops = {k: c[k] for k in ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout")
             if c.get(k)}  # fmt: skip
    if drops:
        return [f"dropout is taken as off (the config says {drops}): set it to 0 for fine-tuning"]
    return []


@dataclass
class HFStepBreakdown:
    """Predicted bytes of one training step (:func:`predict_hf_step`), above the parameters.

    At the peak, ``activations`` (tensors kept for backward, or still referenced),
    ``logits_and_loss`` (the loss's fp32 log-probabilities and labels), ``gradients`` (the
    parameters' or adapters' gradients made so far) and ``transient`` (gradients flowing back and
    the backward's temporaries) add up to ``total``; ``peak_at`` names the op that reached it.
    ``saved`` is what the forward pass kept for backward, by what each tensor is: the output
    of a norm counts under ``norms`` whichever projection keeps it; ``attention_scores`` is
    eager attention's ``seq_len**2`` part; ``checkpointed inputs`` what checkpointed layers keep.
    """

    model_type: str
    batch_size: int
    seq_len: int
    dtype: str
    attn_impl: str
    lora_rank: int | None
    checkpointing: Checkpointing
    activations: int
    logits_and_loss: int
    gradients: int
    transient: int
    total: int
    peak_at: str
    forward_peak: int
    saved: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def components(self) -> dict[str, int]:
        """The four parts of ``total``, in bytes."""
        names = ("activations", "logits_and_loss", "gradients", "transient")
        return {name: getattr(self, name) for name in names}

    @property
    def saved_total(self) -> int:
        return sum(self.saved.values())


def step_spec(
    config: Any,
    batch_size: int,
    seq_len: int,
    attn_impl: str,
    dtype: object,
    lora_rank: int | None,
    checkpointing: Checkpointing | bool | None,
) -> tuple[Arch, StepSpec, str, Checkpointing]:
    """Check the arguments of :func:`predict_hf_step`: ``(Arch, StepSpec, dtype name, mode)``.

    Raises:
        ValueError: see :func:`predict_hf_step`.
    """
    arch = architecture(config)
    positive_int("batch_size", batch_size)
    positive_int("seq_len", seq_len)
    one_of("attn_impl", attn_impl, ("sdpa", "eager"))
    if lora_rank is not None:
        positive_int("lora_rank", lora_rank, "or None for a full fine-tune")
    mode = checkpointing_mode(checkpointing)
    if mode == "attention":
        raise ValueError(
            "checkpointing='attention' is TinyGPT's; Hugging Face models checkpoint whole decoder "
            "layers: use 'blocks' (True) or 'off'"
        )
    if arch.family == "gpt2" and seq_len > arch.max_position_embeddings:
        raise ValueError(
            f"seq_len={seq_len} exceeds GPT-2's n_positions={arch.max_position_embeddings}"
        )
    name = dtype_name(dtype if dtype is not None else _config_dtype(config_dict(config)))
    spec = StepSpec(batch_size, seq_len, DTYPE_BYTES[name], attn_impl == "eager", lora_rank, mode)
    return arch, spec, name, mode


def _config_dtype(c: dict) -> str:
    return str(c.get("dtype") or c.get("torch_dtype") or "float32")


def predict_hf_step(
    config: Any,
    batch_size: int,
    seq_len: int,
    *,
    attn_impl: str = "sdpa",
    dtype: object = None,
    lora_rank: int | None = None,
    checkpointing: Checkpointing | bool | None = "off",
) -> HFStepBreakdown:
    """Predict the peak bytes of one training step of a Hugging Face causal LM.

    Args:
        config: a ``PretrainedConfig`` or its dict, ``model_type`` in
            :data:`~course_lib.hf.arch.SUPPORTED_MODEL_TYPES` (grouped-query attention, tied or
            untied embeddings).
        batch_size, seq_len: the micro-batch, full rows of ``seq_len`` tokens, every one a label.
        attn_impl: ``"sdpa"`` (fused: no ``seq_len**2`` tensor kept) or ``"eager"`` (keeps the
            ``batch x heads x seq_len**2`` probabilities per layer; in bf16 also their fp32 copy).
        dtype: the model's dtype (``torch.bfloat16`` or ``"bf16"``...); default: the config's.
        lora_rank: PEFT LoRA of this rank on every attention and MLP projection (base frozen,
            adapters in fp32); ``None``: a full fine-tune.
        checkpointing: ``"off"``/``False`` or ``"blocks"``/``True`` (every decoder layer).

    Returns:
        :class:`HFStepBreakdown`, ``.total`` in bytes above the parameters.

    Raises:
        ValueError: an unsupported model type (naming it and the supported ones), a bad size,
            dtype, attention path or checkpointing mode.
    """
    arch, spec, name, mode = step_spec(
        config, batch_size, seq_len, attn_impl, dtype, lora_rank, checkpointing
    )
    notes = notes_for(config, seq_len)
    r = replay(record_step(arch, spec))
    return HFStepBreakdown(
        model_type=config_dict(config)["model_type"],
        batch_size=batch_size,
        seq_len=seq_len,
        dtype=name,
        attn_impl=attn_impl,
        lora_rank=lora_rank,
        checkpointing=mode,
        activations=r.activations,
        logits_and_loss=r.logits_and_loss,
        gradients=r.gradients,
        transient=r.transient,
        total=r.peak,
        peak_at=r.peak_at,
        forward_peak=r.forward_peak,
        saved=r.saved,
        notes=notes,
    )
