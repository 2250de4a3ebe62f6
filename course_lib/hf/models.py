"""The four supported families as op recipes: one training step recorded on a tape.

:func:`record_step` writes the forward pass of ``model(input_ids, labels=input_ids,
use_cache=False)`` for a Llama-like model (``llama``, ``mistral``, ``qwen2``: RMSNorm, RoPE,
grouped-query attention, SwiGLU) or GPT-2 (learned positions, LayerNorm, fused ``c_attn``,
tanh-GELU written out op by op) as :mod:`~course_lib.hf.ops` ops, with PEFT LoRA on
every attention and MLP projection if asked, and each decoder layer checkpointed the way
``model.activation_checkpointing_enable()`` does it (non-reentrant; the embedding output is made
to require a gradient so that LoRA's gradients reach the first layer).
"""

from __future__ import annotations

from .arch import Arch, StepSpec
from .gpt2 import gpt2_layer, gpt2_positions
from .layers import (
    attention_masks,
    causal_mask,
    decoder_layer,
    layer_tables,
    rope_tables,
    window_of,
)
from .losses import record_loss
from .ops import Adapters, Lora, Ops
from .tape import Tape


def record_step(arch: Arch, spec: StepSpec) -> Tape:
    """Record one training step of ``arch`` (module docstring); ``replay`` it for the peak.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.

    Returns:
        The :class:`~course_lib.hf.tape.Tape` of one step.
    """
    ops, ad = _recorder(spec)
    tape, full = ops.tape, spec.lora_rank is None
    C, V, N, b = arch.hidden_size, arch.vocab_size, ops.N, spec.b
    gpt2 = arch.family == "gpt2"
    # The base model's locals (embeddings, positions, RoPE's tables, the masks) live until it
    # returns the final hidden state; that and the logits live until the loss is computed.
    # PEFT's modules_to_save trains a copy of the embedding and/or the head beside LoRA.
    embed_trains = full or "embed" in spec.saved_modules
    embeds = [("param", "embed" if full else "embed (saved copy)", V * C * b)]
    x = x0 = tape.op("embed_tokens", "embeddings", [], [N * C * b], (), embeds, embed_trains)[0]
    if arch.embed_scale:  # Gemma: * embed_scale (a buffer already in the model's dtype)
        (x,) = tape.op("embed_tokens", "embeddings", [x0], [N * C * b], (), ops._dx(N * C * b))
        tape.drop(x0)
        x0 = x
    if spec.checkpointing == "blocks" and not embed_trains:
        # enable_input_require_grads(): the embedding output becomes a leaf that needs a
        # gradient, so its AccumulateGrad node holds it until the graph is gone.
        tape.needs_grad[x] = True
        tape.keep(x)
    if gpt2:
        x, extra, pe = gpt2_positions(ops, arch, x, full)
        model_locals = [x0, pe, *extra]
        masks = {0: causal_mask(ops, spec, 0)} if spec.eager else {}
    else:
        extra = rope_tables(ops, arch, spec)
        model_locals = [x0, *extra]
        masks = _masks(ops, arch, spec)
    model_locals += list(masks.values())
    for i in range(arch.num_hidden_layers):
        mask = masks.get(window_of(arch, i), -1)
        ckpt = spec.checkpointed(i)
        if ckpt:
            # GPT-2 passes the mask positionally (saved with the input), Llama as a keyword
            m = (mask,) if mask >= 0 else ()
            # the layer's own keyword arguments: its RoPE pair, the position ids, its mask
            # (packed rows: the batch's own position ids, which the step did not allocate)
            ids = () if spec.documents else (extra[-1],)
            own = extra if gpt2 else (*layer_tables(arch, extra, i), *ids)
            args, captured = ((x, *m), own) if gpt2 else ((x,), (*own, *m))
            tape.begin_checkpoint(args, captured)
        layer = gpt2_layer if gpt2 else decoder_layer
        out = layer(ops, arch, spec, f"layers.{i}", x, extra, mask, full, ad)
        if ckpt:
            tape.end_checkpoint()
        if x != x0:
            tape.drop(x)
        x = out
    if gpt2:
        h = ops.layernorm("norm", "norms", x, C, "norm", full)
    else:
        h = ops.rmsnorm("norm", "norms", x, C, "norm", full, kind=arch.norm)
    tape.drop(x, *model_locals)
    head = "embed" if arch.tie_word_embeddings and full else "lm_head"
    if "head" in spec.saved_modules:
        head = "lm_head (saved copy)"
    record_loss(ops, arch, spec, h, head, full or "head" in spec.saved_modules, ad)
    return tape


def _recorder(spec: StepSpec) -> tuple[Ops, Adapters | None]:
    """The ops recorder for ``spec`` on a new tape, and the LoRA adapters (``None``: a full
    fine-tune); PEFT's dropout keeps a mask of the adapter's dtype on the CPU, a bool on CUDA."""
    ops = Ops(Tape(), spec.batch_size, spec.seq_len, spec.b, spec.quant)
    ops.compute_b = spec.compute_b or spec.b
    ops.cuda = spec.device == "cuda"
    ops.half = spec.half
    ops.nf4_keeps_input = spec.nf4_keeps_input
    ops.tape.reentrant = spec.reentrant
    if spec.lora_rank is None:
        return ops, None
    mask = 1 if ops.cuda else spec.adapter_b
    lora = Lora(spec.lora_rank, spec.adapter_b, spec.lora_dropout, mask)
    return ops, Adapters(lora, spec.lora_targets)


def _masks(ops: Ops, arch: Arch, spec: StepSpec) -> dict[int, int]:
    """The attention masks, one per kind of layer (by window). Packed documents (position ids
    reset) with sdpa: transformers finds them and builds a block-diagonal causal mask,
    ``(batch, 1, seq_len, seq_len)`` booleans, for each kind of layer (Gemma 3: sliding and
    full); otherwise :func:`~course_lib.hf.layers.attention_masks`."""
    if not (spec.documents and not spec.eager and not spec.flash):
        return attention_masks(ops, arch, spec)
    kinds = sorted({window_of(arch, i) for i in range(arch.num_hidden_layers)})
    size = spec.batch_size * spec.seq_len**2
    return {w: ops.tape.tensor(size, False, "", "packed mask") for w in kinds}
