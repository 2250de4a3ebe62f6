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

from dataclasses import dataclass

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
from .ops import Lora, Ops
from .tape import Tape


@dataclass(frozen=True)
class Arch:
    """The config fields the memory model reads (names as in Llama's config), and the recipe
    choices that tell the supported families apart (``families.py`` fills them in)."""

    family: str  # "llama" (every decoder in families.py) or "gpt2"
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    num_hidden_layers: int
    vocab_size: int
    max_position_embeddings: int  # GPT-2's learned position table has this many rows
    tie_word_embeddings: bool
    qkv_bias: bool = False  # qwen2: biases on q, k, v (Llama's attention_bias: on o too)
    o_bias: bool = False
    mlp_bias: bool = False
    activation: str = "silu"  # GPT-2: "gelu_new" (eight ops) or a fused "gelu"/"gelu_pytorch_tanh"
    model_type: str = ""
    norm: str = "llama"  # RMSNorm's weight: "llama", "olmo2" or "gemma" (ops.rmsnorm)
    layout: str = "pre"  # norms: "pre" (Llama), "post" (OLMo 2), "sandwich" (Gemma 2 and 3)
    qk_norm: str = ""  # "head" (Qwen3, Gemma 3: per head) or "full" (OLMo 2: whole projection)
    qk_norm_each: bool = False  # the norm follows each projection (Qwen3, OLMo 2), not all three
    fused: bool = False  # Phi-3: one qkv_proj and one gate_up_proj
    embed_scale: bool = False  # Gemma: the embeddings times sqrt(hidden_size)
    attn_softcap: float = 0.0  # Gemma 2: tanh soft-capping of the attention scores (eager)
    final_softcap: float = 0.0  # Gemma 2: tanh soft-capping of the logits
    windows: tuple = ()  # per layer: a sliding window's width, or 0 (full attention)
    rope_tables: int = 1  # Gemma 3: local and global RoPE tables
    rotary_dim: int = 0  # Phi-3 / Phi-4: RoPE on the first rotary_dim of each head (0: all)
    n_experts: int = 0  # mixture of experts: routed experts per layer
    top_k: int = 0
    moe_intermediate: int = 0


@dataclass(frozen=True)
class StepSpec:
    """What is being trained: shape, element size, attention path, LoRA, checkpointing, and
    the settings :func:`~course_lib.hf.predict.predict_hf_step` takes (its docstring)."""

    batch_size: int
    seq_len: int
    b: int  # bytes per element of the model's dtype
    eager: bool
    lora_rank: int | None
    checkpointing: bool
    lora_targets: tuple = ()  # projection names (lora_modules); () = every projection
    lora_dropout: bool = False
    adapter_b: int = 4
    flash: bool = False  # FlashAttention-2 (CUDA): saves q, k, v, out and the log-sum-exp
    loss: str = "standard"  # or "chunked": fused linear cross-entropy, no full logits
    loop: str = "trainer"  # or "plain": the outputs (and their logits) live through backward
    device: str = "cpu"  # "cuda": CUDA kernels' own tensors (stats, masks, workspaces)
    checkpoint_every: int = 1
    quant: str = ""  # "nf4" or "int8": frozen projections stored by bitsandbytes
    upcast: bool = False  # prepare_model_for_kbit_training: the other weights cast to fp32
    compute_b: int = 0  # a quantised projection's compute dtype (0: the model's)
    expert_tokens: tuple = ()  # tokens each expert receives, per layer (MoE)
    half: bool = False  # the model's dtype is float16 (not bfloat16)
    experts: str = "grouped_mm"  # mixture of experts: transformers' experts_implementation
    documents: int = 0  # packed documents per row (0: one sequence a row, no packing)

    @property
    def attn(self) -> str:
        return "eager" if self.eager else "flash" if self.flash else "sdpa"

    def checkpointed(self, layer: int) -> bool:
        """Is decoder layer ``layer`` checkpointed (every ``checkpoint_every``-th)?"""
        return self.checkpointing and layer % self.checkpoint_every == 0


class Adapters:
    """Which projections get a LoRA adapter (by PEFT module name), and the adapter itself."""

    def __init__(self, lora: Lora, targets: tuple) -> None:
        self.lora, self.targets = lora, set(targets)

    def __call__(self, name: str) -> Lora | None:
        return self.lora if not self.targets or name in self.targets else None


def record_step(arch: Arch, spec: StepSpec) -> Tape:
    """Record one training step of ``arch`` (module docstring); ``replay`` it for the peak."""
    tape = Tape()
    ops = Ops(tape, spec.batch_size, spec.seq_len, spec.b, spec.quant)
    ops.compute_b = spec.compute_b or spec.b
    ops.cuda = spec.device == "cuda"
    ops.half = spec.half
    full = spec.lora_rank is None
    ad = None
    if not full:
        mask = 1 if ops.cuda else spec.adapter_b
        lora = Lora(spec.lora_rank, spec.adapter_b, spec.lora_dropout, mask)
        ad = Adapters(lora, spec.lora_targets)
    C, V, N, b = arch.hidden_size, arch.vocab_size, ops.N, spec.b
    gpt2 = arch.family == "gpt2"
    # The base model's locals (embeddings, positions, RoPE's tables, the masks) live until it
    # returns the final hidden state; that and the logits live until the loss is computed.
    embeds = [("param", "embed", V * C * b)]
    x = x0 = tape.op("embed_tokens", "embeddings", [], [N * C * b], (), embeds, full)[0]
    if arch.embed_scale:  # Gemma: * embed_scale (a buffer already in the model's dtype)
        (x,) = tape.op("embed_tokens", "embeddings", [x0], [N * C * b], (), ops._dx(N * C * b))
        tape.drop(x0)
        x0 = x
    if spec.checkpointing and not full:
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
        masks = attention_masks(ops, arch, spec)
        if spec.documents and not spec.eager and not spec.flash:
            # packed documents (position ids reset): transformers finds them and builds a
            # block-diagonal causal mask, (batch, 1, seq_len, seq_len) booleans, for sdpa: one
            # for each kind of layer (Gemma 3: sliding and full)
            kinds = sorted({window_of(arch, i) for i in range(arch.num_hidden_layers)})
            size = spec.batch_size * spec.seq_len**2
            masks = {w: tape.tensor(size, False, "", "packed mask") for w in kinds}
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
    head = "embed" if arch.tie_word_embeddings else "lm_head"
    record_loss(ops, arch, spec, h, head, full)
    return tape


def lora_shapes(arch: Arch) -> list[tuple[int, int]]:
    """``(in, out)`` of each projection that gets a LoRA adapter, in one layer: the attention
    and MLP projections (``q k v o gate up down``; GPT-2: ``c_attn c_proj c_fc c_proj``)."""
    C, M = arch.hidden_size, arch.intermediate_size
    if arch.family == "gpt2":
        return [(C, 3 * C), (C, C), (C, M), (M, C)]
    q, kv = arch.num_attention_heads * arch.head_dim, arch.num_key_value_heads * arch.head_dim
    return [(C, q), (C, kv), (C, kv), (q, C), (C, M), (C, M), (M, C)]


def layer_dims(arch: Arch) -> list[tuple[int, int]]:
    """``(rows, row length)`` of every parameter tensor of one decoder layer, as
    ``transformers`` holds them (dim 0 and the product of the others)."""
    C, M = arch.hidden_size, arch.intermediate_size
    if arch.family == "gpt2":  # Conv1D keeps (in, out)
        return [(C, 1), (C, 1), (C, 3 * C), (3 * C, 1), (C, C), (C, 1), (C, 1), (C, 1),
                (C, M), (M, 1), (M, C), (C, 1)]  # fmt: skip
    d, H, K = arch.head_dim, arch.num_attention_heads, arch.num_key_value_heads
    q, kv = H * d, K * d
    layer = [(C, 1)] * {"pre": 2, "post": 2, "sandwich": 4}[arch.layout]
    if arch.fused:
        layer += [(q + 2 * kv, C)] + [(q + 2 * kv, 1)] * arch.qkv_bias
    else:
        layer += [(q, C), (kv, C), (kv, C)] + [(q, 1), (kv, 1), (kv, 1)] * arch.qkv_bias
    layer += [(C, q)] + [(C, 1)] * arch.o_bias
    if arch.qk_norm == "head":
        layer += [(d, 1), (d, 1)]
    elif arch.qk_norm == "full":
        layer += [(q, 1), (kv, 1)]
    if arch.n_experts:
        E, Me = arch.n_experts, arch.moe_intermediate
        layer += [(E, C), (E, 2 * Me * C), (E, C * Me)]  # router, gate_up_proj, down_proj
    elif arch.fused:
        layer += [(2 * M, C), (C, M)] + [(2 * M, 1), (C, 1)] * arch.mlp_bias
    else:
        layer += [(M, C), (M, C), (C, M)] + [(M, 1), (M, 1), (C, 1)] * arch.mlp_bias
    return layer


def root_dims(arch: Arch) -> list[tuple[int, int]]:
    """The parameters outside the decoder layers: the embeddings (GPT-2: and its positions),
    the final norm (GPT-2: LayerNorm's weight and bias) and an untied head."""
    C, V = arch.hidden_size, arch.vocab_size
    head = [] if arch.tie_word_embeddings else [(V, C)]
    if arch.family == "gpt2":
        return [(V, C), (arch.max_position_embeddings, C), (C, 1), (C, 1)] + head
    return [(V, C), (C, 1)] + head


def parameter_dims(arch: Arch) -> list[tuple[int, int]]:
    """Every parameter tensor's ``(rows, row length)`` (a tied embedding once): what FSDP's
    dim-0 sharding divides (:func:`root_dims` and :func:`layer_dims` for every layer)."""
    return root_dims(arch) + layer_dims(arch) * arch.num_hidden_layers


def parameter_shapes(arch: Arch) -> list[int]:
    """The element count of every parameter tensor (:func:`parameter_dims`): what a
    per-tensor optimiser state, ZeRO's partition or bitsandbytes' ``min_8bit_size`` sees."""
    return [rows * cols for rows, cols in parameter_dims(arch)]


def parameter_count(arch: Arch) -> int:
    """Parameters of the model (a tied embedding counted once)."""
    return sum(parameter_shapes(arch))


def lora_parameter_count(arch: Arch, rank: int) -> int:
    """Trainable parameters of rank-``rank`` LoRA on every attention and MLP projection."""
    return arch.num_hidden_layers * sum(rank * (i + o) for i, o in lora_shapes(arch))
