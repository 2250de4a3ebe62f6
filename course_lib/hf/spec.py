"""What the memory model reads from a config (:class:`Arch`) and what one step trains
(:class:`StepSpec`): the records :mod:`~course_lib.hf.families` fills in and
:mod:`~course_lib.hf.models` reads."""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import Checkpointing


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
    checkpointing: Checkpointing  # "off" or "blocks" (every checkpoint_every-th decoder layer)
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
    # PEFT's modules_to_save: a trainable copy of the embedding ("embed") and/or the head ("head")
    saved_modules: tuple = ()
    # bitsandbytes before 0.43.2: MatMul4Bit keeps its input on ctx (ctx.tensors = (A, B))
    nf4_keeps_input: bool = False
    reentrant: bool = False  # checkpointing with use_reentrant=True (Tape.reentrant)

    @property
    def attn(self) -> str:
        """The attention path: ``"eager"``, ``"flash"`` or ``"sdpa"``."""
        return "eager" if self.eager else "flash" if self.flash else "sdpa"

    def checkpointed(self, layer: int) -> bool:
        """Is decoder layer ``layer`` checkpointed (every ``checkpoint_every``-th)?

        Args:
            layer: the layer's index.

        Returns:
            Whether it is checkpointed.
        """
        return self.checkpointing == "blocks" and layer % self.checkpoint_every == 0
