"""TinyGPT: a small causal language model whose attention path is a visible choice.

It makes the course's one idea measurable: linear layers cost memory in proportion to
``batch_size * seq_len``, materialised attention scores ``batch_size * n_heads * seq_len**2``.
``TinyGPTConfig.attn_impl`` picks the attention path:

* ``"eager"``: ``softmax(Q Kᵀ / sqrt(d))`` as a real ``(B, H, T, T)`` tensor, kept by autograd
  for the backward pass: the quadratic term the lessons measure;
* ``"sdpa"``: ``F.scaled_dot_product_attention``, fused on the CPU (FlashAttention on a GPU): the
  scores are never materialised;
* ``"varlen"``: packed rows only, one causal SDPA call per document cut out with ``cu_seq_lens``.

Packed batches carry ``cu_seq_lens`` (as Hugging Face's ``DataCollatorWithFlattening``) or
``document_ids``; eager and sdpa then attend through one block-diagonal mask per forward
(:func:`course_lib.masks.mask_for_batch`). A packed batch *without* them is attended as one long
causal row: the careless-packing leak of lesson 2. ``model(**batch).loss`` is the mean
cross-entropy over label tokens, or ``sum / num_items_in_batch`` when that count is given (the
token-weighted accumulation fix), as in Hugging Face.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ._checks import Checkpointing, checkpointing_mode, one_of, positive_int
from .batch import check_model_inputs
from .loss import causal_lm_loss
from .masks import mask_for_batch

ATTN_IMPLS = ("eager", "sdpa", "varlen")


@dataclass(frozen=True)
class TinyGPTConfig:
    """Shape of a :class:`TinyGPT`. Frozen: derive variants with ``dataclasses.replace``."""

    vocab_size: int = 260  # 256 bytes + 4 special tokens (course_lib.data)
    d_model: int = 64  # channels of the residual stream (C)
    n_heads: int = 4  # attention heads (H); the score tensor is (B, H, T, T)
    n_layers: int = 2  # transformer blocks (L)
    max_seq_len: int = 1024  # longest row: sizes the RoPE tables, nothing learned
    attn_impl: str = "eager"  # "eager" materialises scores, "sdpa" is fused, "varlen" per document
    # What the backward pass recomputes: nothing ("off"), each whole block, or its attention half.
    checkpointing: Checkpointing = "off"
    checkpoint_every: int = 1  # checkpoint blocks 0, k, 2k, ... (1 = every block)
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * d_model
    rope_base: float = 10000.0  # RoPE's frequency base

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_seq_len", "mlp_ratio"):
            positive_int(f"TinyGPTConfig.{name}", getattr(self, name))
        positive_int("TinyGPTConfig.checkpoint_every", self.checkpoint_every)
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}: "
                "each head needs d_model // n_heads channels"
            )
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(f"head dim d_model // n_heads = {self.head_dim} must be even for RoPE")
        one_of("attn_impl", self.attn_impl, ATTN_IMPLS)
        # The one place a checkpointing setting is normalised (frozen: set through object).
        object.__setattr__(self, "checkpointing", checkpointing_mode(self.checkpointing))

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def d_mlp(self) -> int:
        return self.mlp_ratio * self.d_model


@dataclass
class CausalLMOutput:
    """What ``TinyGPT.forward`` returns (Hugging Face field names)."""

    loss: torch.Tensor | None
    logits: torch.Tensor
    n_loss_tokens: int | None = None


def rope_tables(
    seq_len: int, head_dim: int, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables of shape ``(seq_len, head_dim)`` for rotary position embeddings.

    Args:
        seq_len: positions to tabulate (``max_seq_len``).
        head_dim: channels per head ``D`` (even: channels rotate in pairs).
        base: frequency base; pair ``i`` turns by ``base ** (-2i / D)`` radians per position.

    Returns:
        ``(cos, sin)``, float32, each ``(seq_len, head_dim)``; the two halves of the last axis
        repeat the same angles.
    """
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # (T, D/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, D)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``(B, H, T, D)`` by per-token angles ``cos`` / ``sin`` ``(B, 1, T, D)``.

    Args:
        x: queries or keys, ``(B, H, T, D)``.
        cos: cosines of each token's angles, ``(B, 1, T, D)`` (broadcast over heads).
        sin: sines of the same angles.

    Returns:
        ``(B, H, T, D)``: channel ``i`` paired with ``i + D/2`` and turned by its angle, so the
        dot product of a query and a key depends only on their distance.
    """
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin  # x, rotated


Mask = Tensor | None  # a bool (T, T) future mask, an additive (B, 1, T, T) one, or none
Offsets = Tensor | None  # cu_seq_lens: int32 offsets of the packed documents, or none


class Attention(nn.Module):
    """Multi-head causal self-attention with RoPE, on the path ``config.attn_impl`` names."""

    def __init__(self, config: TinyGPTConfig) -> None:
        """Fused q/k/v projection ``C -> 3C`` and output projection ``C -> C``, no biases.

        Args:
            config: the model's shape; ``attn_impl`` is read at every forward.
        """
        super().__init__()
        self.config = config
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Mask, cu_seq_lens: Offsets
    ) -> Tensor:
        """``(B, T, C)`` in, ``(B, T, C)`` out; ``cos``/``sin`` ``(B, 1, T, D)`` rotate q and k.

        Args:
            x: ``(B, T, C)``, the residual stream (``C = d_model``).
            cos: ``(B, 1, T, D)`` RoPE cosines at each token's position (``D = head_dim``).
            sin: ``(B, 1, T, D)`` RoPE sines.
            mask: the bool ``(T, T)`` future mask, an additive ``(B, 1, T, T)`` document or padding
                mask, or ``None`` (see :func:`course_lib.masks.mask_for_batch`).
            cu_seq_lens: int offsets of packed documents in the flattened ``B * T`` stream, read by
                ``"varlen"`` only; ``None`` otherwise.

        Returns:
            ``(B, T, C)``: the heads' outputs concatenated and projected.
        """
        B, T, C = x.shape
        H, D = self.config.n_heads, self.config.head_dim
        q, k, v = self.qkv(x).split(C, dim=-1)  # 3 x (B, T, C)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        v = v.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        impl = self.config.attn_impl
        if impl == "varlen" and cu_seq_lens is not None:
            y = self._varlen(q, k, v, cu_seq_lens)
        elif impl == "eager":
            # Scaling q (B*T*C elements) is cheaper than scaling the (B, H, T, T) scores. The
            # explicit copies make the saved tensors the same for every batch size (matmul would
            # copy for B > 1 and keep the strided views, and the fused qkv buffer, for B == 1).
            q = (q * (1.0 / math.sqrt(D))).contiguous()  # (B, H, T, D)
            k, v = k.contiguous(), v.contiguous()  # (B, H, T, D)
            scores = q @ k.transpose(-2, -1)  # (B, H, T, T)
            assert mask is not None  # eager always gets one (masks.mask_for_batch)
            if mask.dtype == torch.bool:  # (T, T) True above the diagonal: the future
                scores = scores.masked_fill(mask, float("-inf"))
            else:  # additive (B, 1, T, T) document or padding mask
                scores = scores + mask
            att = torch.softmax(scores, dim=-1)  # (B, H, T, T): the quadratic term
            y = att @ v  # (B, H, T, D)
        else:  # sdpa, or varlen on an unpacked batch (one document per row)
            if mask is None or mask.dtype == torch.bool:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        return self.proj(y)

    @staticmethod
    def _varlen(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seq_lens: torch.Tensor
    ) -> torch.Tensor:
        B, H, T, D = q.shape
        # Fold rows into one stream so offsets index tokens directly.
        q, k, v = (t.transpose(0, 1).reshape(1, H, B * T, D) for t in (q, k, v))  # (1, H, B*T, D)
        bounds = cu_seq_lens.tolist()
        parts = [
            F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, s:e], v[:, :, s:e], is_causal=True)
            for s, e in zip(bounds[:-1], bounds[1:])
        ]
        y = torch.cat(parts, dim=2)  # (1, H, B*T, D)
        return y.view(H, B, T, D).transpose(0, 1)  # (B, H, T, D)


class MLP(nn.Module):
    """``down(gelu(up(x)))``, ``d_model -> d_mlp -> d_model``."""

    def __init__(self, config: TinyGPTConfig) -> None:
        """Two bias-free linear layers around a GELU.

        Args:
            config: ``d_model`` and ``d_mlp = mlp_ratio * d_model``.
        """
        super().__init__()
        self.up = nn.Linear(config.d_model, config.d_mlp, bias=False)
        self.down = nn.Linear(config.d_mlp, config.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, C)`` in, ``(B, T, C)`` out.

        Args:
            x: ``(B, T, C)``.

        Returns:
            ``(B, T, C)``; the hidden ``(B, T, d_mlp)`` is saved for the backward pass.
        """
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(ln(x))`` then ``x + mlp(ln(x))``."""

    def __init__(self, config: TinyGPTConfig, checkpoint_mode: Checkpointing) -> None:
        """Attention and MLP, each behind its LayerNorm.

        Args:
            config: the model's shape.
            checkpoint_mode: what this block recomputes in the backward pass: ``"off"``,
                ``"blocks"`` (the whole block) or ``"attention"`` (its attention half).
        """
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = Attention(config)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.mlp = MLP(config)
        self.checkpoint_mode = checkpoint_mode

    def _attn_part(self, x: torch.Tensor, *rest: Any) -> torch.Tensor:
        return x + self.attn(self.ln1(x), *rest)

    def _mlp_part(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.ln2(x))

    def _full(self, x: torch.Tensor, *rest: Any) -> torch.Tensor:
        return self._mlp_part(self._attn_part(x, *rest))

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, mask: Mask, cu_seq_lens: Offsets
    ) -> Tensor:
        """``(B, T, C)`` in and out; recomputed in the backward pass per ``checkpoint_mode``.

        Args:
            x: ``(B, T, C)``, the residual stream (``C = d_model``).
            cos: ``(B, 1, T, D)`` RoPE cosines at each token's position (``D = head_dim``).
            sin: ``(B, 1, T, D)`` RoPE sines.
            mask: the bool ``(T, T)`` future mask, an additive ``(B, 1, T, T)`` document or padding
                mask, or ``None`` (see :func:`course_lib.masks.mask_for_batch`).
            cu_seq_lens: int offsets of packed documents in the flattened ``B * T`` stream, read by
                ``"varlen"`` only; ``None`` otherwise.

        Returns:
            ``(B, T, C)``: the residual stream after both halves. Without grad (evaluation) nothing
            is checkpointed: there is no backward pass to save memory for.
        """
        mode = self.checkpoint_mode if torch.is_grad_enabled() else "off"
        if mode == "blocks":
            return checkpoint(self._full, x, cos, sin, mask, cu_seq_lens, use_reentrant=False)
        if mode == "attention":
            x = checkpoint(self._attn_part, x, cos, sin, mask, cu_seq_lens, use_reentrant=False)
            return self._mlp_part(x)
        return self._full(x, cos, sin, mask, cu_seq_lens)


class TinyGPT(nn.Module):
    """A small pre-norm GPT with RoPE, called like a Hugging Face causal LM."""

    rope_cos: torch.Tensor  # (max_seq_len, head_dim), a buffer
    rope_sin: torch.Tensor

    def __init__(self, config: TinyGPTConfig) -> None:
        """Embedding, ``n_layers`` blocks, final LayerNorm, untied head; weights ~ N(0, 0.02).

        Block ``i`` is checkpointed when ``i % checkpoint_every == 0`` (and ``checkpointing`` is not
        ``"off"``). The RoPE tables are buffers, not parameters.

        Args:
            config: the model's shape, attention path and checkpointing.
        """
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(
            Block(config, config.checkpointing if i % config.checkpoint_every == 0 else "off")
            for i in range(config.n_layers)
        )
        self.ln_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        cos, sin = rope_tables(config.max_seq_len, config.head_dim, config.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_parameters(self) -> int:
        """Every parameter's elements (what :func:`course_lib.memory.parameter_count` predicts).

        Returns:
            The element count of all weights (not bytes: multiply by 4 for float32).
        """
        return sum(p.numel() for p in self.parameters())

    def set_attn_impl(self, attn_impl: str) -> None:
        """Switch this model's attention path (same weights); the caller's config is untouched.

        Args:
            attn_impl: ``"eager"``, ``"sdpa"`` or ``"varlen"``.

        Raises:
            ValueError: an unknown attention path.
        """
        self.config = replace(self.config, attn_impl=one_of("attn_impl", attn_impl, ATTN_IMPLS))
        for block in self.blocks:
            assert isinstance(block, Block)
            block.attn.config = self.config

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        cu_seq_lens: torch.Tensor | None = None,
        max_length: int | None = None,
        document_ids: torch.Tensor | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
    ) -> CausalLMOutput:
        """Logits ``(B, T, vocab_size)`` and, with ``labels``, the next-token loss.

        Takes a batch dict of :mod:`course_lib.batch` as keyword arguments (``max_length`` is
        accepted for that contract, not needed); ``labels[:, t + 1]`` is position ``t``'s target.

        Args:
            input_ids: int ``(B, T)`` token ids in ``[0, vocab_size)``, ``T <= max_seq_len``.
            labels: int ``(B, T)`` targets, ``-100`` where no loss is taken; ``None``: no loss.
            attention_mask: ``(B, T)`` 1 for real tokens, 0 for padding (a padded batch).
            position_ids: ``(B, T)`` each token's position; ``None`` means ``0 .. T-1`` per row
                (a packed batch restarts them at every document).
            cu_seq_lens: int ``(D + 1,)`` cumulative document lengths of a packed batch.
            max_length: the longest document of a packed batch (accepted, unused).
            document_ids: int ``(B, T)`` each token's document in a packed batch.
            num_items_in_batch: label tokens of the whole optimiser step; the loss is then
                ``sum / num_items_in_batch`` instead of the mean over this batch's label tokens.

        Returns:
            :class:`CausalLMOutput`: ``logits`` float ``(B, T, vocab_size)``; with labels, ``loss``
            (a 0-d tensor) and ``n_loss_tokens`` (the label tokens this batch counted).

        Raises:
            ValueError: a batch that breaks the contract (:func:`course_lib.batch.
                check_model_inputs`, :func:`course_lib.masks.mask_for_batch`).
        """
        cfg = self.config
        B, T = check_model_inputs(
            input_ids, cfg.vocab_size, cfg.max_seq_len, position_ids,
            labels=labels, attention_mask=attention_mask, document_ids=document_ids,
        )  # fmt: skip
        if position_ids is None:
            position_ids = torch.arange(T, device=input_ids.device).expand(B, T)
        cos = self.rope_cos[position_ids][:, None]  # (B, 1, T, D)
        sin = self.rope_sin[position_ids][:, None]  # (B, 1, T, D)
        mask = mask_for_batch(  # built once, shared by every layer
            cfg.attn_impl, input_ids, self.embed.weight.dtype,
            cu_seq_lens=cu_seq_lens, document_ids=document_ids, attention_mask=attention_mask,
        )  # fmt: skip

        x = self.embed(input_ids)  # (B, T, C)
        for block in self.blocks:
            x = block(x, cos, sin, mask, cu_seq_lens)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)

        if labels is None:
            return CausalLMOutput(loss=None, logits=logits)
        loss, n_tokens = causal_lm_loss(logits, labels, num_items_in_batch)
        return CausalLMOutput(loss=loss, logits=logits, n_loss_tokens=n_tokens)
