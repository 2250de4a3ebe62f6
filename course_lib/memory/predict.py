"""The analytical memory model of one TinyGPT training step, term by term.

:func:`attention_elements` and :func:`activation_bytes` compute, from the shape alone, what one
forward + backward pass of :class:`~course_lib.model.TinyGPT` keeps alive. Each term is a tensor
that autograd saves for one operation (derived from the ops the model runs, not fitted), written
on its own line so it can be read beside the model's code; the peak is the largest of a list of
named moments of the backward pass. :mod:`course_lib.memory.sweep` checks the model against the
meter.

Notation: ``N = batch_size * seq_len`` tokens, ``C = d_model``, ``M = d_mlp``, ``V =
vocab_size``, ``H = n_heads``, ``L = n_layers``, ``hd = C / H``, ``b`` bytes per element.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .._checks import Checkpointing, checkpointing_mode, positive_int, seq_len_within
from ..model import TinyGPTConfig
from ..units import FP32, INT64


def attention_elements(batch_size: int, n_heads: int, seq_len: int) -> int:
    """Elements of one layer's attention-score tensor: ``batch_size * n_heads * seq_len**2``.

    The usual worked example (16,384 tokens per step, 32 heads): 16 x 32 x 1024² = 536,870,912
    (about 5.4e8) against 2 x 32 x 8192² = 4,294,967,296 (about 4.3e9): 8 times more.

    Args:
        batch_size: rows ``B``.
        n_heads: attention heads ``H``.
        seq_len: tokens per row ``T``.

    Returns:
        ``B * H * T²``: a count of elements, not bytes (multiply by the dtype's size: 4 for fp32).

    Raises:
        ValueError: a size that is not a positive int.
    """
    positive_int("batch_size", batch_size)
    positive_int("n_heads", n_heads)
    positive_int("seq_len", seq_len)
    return batch_size * n_heads * seq_len * seq_len


def parameter_count(config: TinyGPTConfig) -> int:
    """Parameters of a :class:`TinyGPT` with this config (weights only; no biases in linears).

    Args:
        config: the model's shape.

    Returns:
        ``V C`` (embedding) ``+ L (4C + 4C² + 2CM)`` (2 LayerNorms, q/k/v + output projection,
        up + down) ``+ 2C`` (final LayerNorm) ``+ V C`` (untied head), in elements; equal to
        :meth:`TinyGPT.num_parameters <course_lib.model.TinyGPT.num_parameters>`.
    """
    d, v, L = config.d_model, config.vocab_size, config.n_layers
    per_block = 2 * (2 * d) + 3 * d * d + d * d + 2 * d * config.d_mlp  # 2 LayerNorms, attn, MLP
    return v * d + L * per_block + 2 * d + v * d  # embedding, blocks, final LN, untied head


# ActivationBreakdown's parts of the peak, in the order the lessons stack them.
COMPONENTS = ("attention_scores", "attention_qkv", "mlp_hidden", "norms", "residual_stream",
              "rope_and_masks", "logits_and_loss", "backward_transient")  # fmt: skip


@dataclass
class ActivationBreakdown:
    """Predicted bytes of one TinyGPT forward + backward at one shape (:func:`activation_bytes`).

    The first fields are what the forward pass leaves alive for backward, by component; their
    sum is ``saved_total``. ``backward_transient`` is the extra that the worst moment of the
    backward pass adds on top (gradients in flight); ``total`` is the predicted peak and is what
    :func:`~course_lib.memory.measure` is compared with. ``peak_at`` names that worst moment.
    """

    batch_size: int
    seq_len: int
    attn_impl: str
    checkpointing: Checkpointing
    attention_scores: int
    attention_qkv: int
    mlp_hidden: int
    norms: int
    residual_stream: int
    rope_and_masks: int
    logits_and_loss: int
    saved_total: int
    backward_transient: int
    total: int
    peak_at: str

    def components(self) -> dict[str, int]:
        """The saved-for-backward components plus the backward transient, in bytes.

        Returns:
            ``{name: bytes}`` for every name of :data:`COMPONENTS`, in stacking order; the
            values sum to ``total``.
        """
        return {name: getattr(self, name) for name in COMPONENTS}


@dataclass(frozen=True)
class _Shape:
    """The sizes every term is written in (see the module docstring)."""

    b: int
    B: int
    T: int
    C: int
    M: int
    H: int
    L: int
    V: int
    hd: int
    eager: bool

    @property
    def N(self) -> int:
        return self.B * self.T


def block_terms(s: _Shape) -> dict[str, int]:
    """What one plain (not checkpointed) block saves for backward, by component, in bytes.

    Args:
        s: the step's sizes (batch, sequence, widths, bytes per element, eager or fused).

    Returns:
        ``{"scores", "qkv", "mlp", "norms", "resid"}`` in bytes; ``"scores"`` (``B H T² b``) is 0
        for the fused paths.
    """
    N, C, M, b = s.N, s.C, s.M, s.b
    return {
        # eager: the softmax probabilities, (B, H, T, T) -- the quadratic term
        "scores": s.B * s.H * s.T * s.T * b if s.eager else 0,
        # eager: contiguous q, k, v and the pre-projection output; sdpa: the fused qkv output,
        # rotated q and k, the output, and the kernel's log-sum-exp (B, H, T) in fp32
        "qkv": 4 * N * C * b if s.eager else 6 * N * C * b + s.B * s.H * s.T * FP32,
        "mlp": 2 * N * M * b,  # the up-projection output and the GELU output
        "norms": 2 * N * C * b + 4 * N * FP32,  # 2 LayerNorm outputs + (mean, rstd) each
        "resid": 2 * N * C * b,  # the residual stream after attention and after the MLP
    }


def shared_terms(s: _Shape) -> dict[str, int]:
    """What the step saves outside the blocks, in bytes.

    Args:
        s: the step's sizes (batch, sequence, widths, bytes per element, eager or fused).

    Returns:
        ``{"rope_masks", "embed", "head"}`` in bytes: the RoPE tables gathered per token (and
        eager's ``T²`` bool mask), the embedding output, and the head's saved set (final norm,
        int64 labels, fp32 log-probabilities ``N V``).
    """
    N, C, b = s.N, s.C, s.b
    return {
        "rope_masks": 2 * N * s.hd * b + (s.T * s.T if s.eager else 0),  # cos, sin; eager's mask
        "embed": N * C * b,  # the embedding output (the first block's input)
        # final norm (output + statistics), int64 shifted labels, fp32 log-probabilities
        "head": N * C * b + 2 * N * FP32 + INT64 * N + N * s.V * FP32,
    }


def block_modes(mode: Checkpointing, n_layers: int, checkpoint_every: int) -> list[Checkpointing]:
    """What each block recomputes, bottom to top: blocks ``0, k, 2k, ...`` use ``mode`` for
    ``checkpoint_every = k``, the others ``"off"``.

    Args:
        mode: the checkpointing mode of the checkpointed blocks.
        n_layers: blocks in the model.
        checkpoint_every: the stride ``k`` (1: every block).

    Returns:
        One mode per block, bottom (0) to top, as :class:`~course_lib.model.TinyGPT` assigns them.
    """
    return [mode if i % checkpoint_every == 0 else "off" for i in range(n_layers)]


def _mlp_half(s: _Shape) -> int:
    """The MLP half's saved set: its input, ln2 output and statistics, up and GELU outputs."""
    return 2 * s.N * s.C * s.b + 2 * s.N * FP32 + 2 * s.N * s.M * s.b


def _block_moments(
    s: _Shape, i: int, mode: Checkpointing, entering: int, kept: int, terms: dict[str, int]
) -> dict[str, int]:
    """The candidate peaks while the backward pass is inside block ``i`` (bytes)."""
    N, C, M, b = s.N, s.C, s.M, s.b
    block = sum(terms.values())
    scores, qkv, mlp_half = terms["scores"], terms["qkv"], _mlp_half(s)
    grads_mlp_half = 2 * C * M * b + 2 * C * b  # up, down, ln2
    name = "top block" if i == s.L - 1 else f"block {i}"
    whole = entering - kept + block  # block i's whole saved set is alive (again)
    mlp_at = entering if mode == "attention" else whole
    attn_only = whole - mlp_half + grads_mlp_half  # MLP half done, attention half alive
    out = {
        # the down-projection's weight gradient, then the GELU gradients in flight
        f"{name} MLP": mlp_at + C * M * b + N * M * b,
        # the up-projection's weight gradient and dx beside the GELU-input gradient
        f"{name} MLP up": mlp_at + 2 * C * M * b - N * M * b + N * C * b,
    }
    if s.eager:
        # proj's input freed, its weight gradient in, then two (B, H, T, T) gradients
        softmax = attn_only - N * C * b + C * C * b + 2 * scores
        out[f"{name} softmax"] = softmax
        # just before the softmax's: att @ v's gradients (d_att, dv) beside dy's copy and v
        out[f"{name} attention backward"] = softmax - scores + 2 * N * C * b
    else:
        # proj's weight gradient, dy, then the fused kernel's q/k/v gradients (3 N C)
        out[f"{name} attention backward"] = attn_only + C * C * b + 4 * N * C * b
    # The qkv projection: q/k/v's gradients, its weight gradient (3 C²) and dx. A plain bottom
    # block has used RoPE's tables (and the mask) for the last time by then.
    released = shared_terms(s)["rope_masks"] if i == 0 and mode == "off" else 0
    out[f"{name} qkv backward"] = (
        attn_only - qkv - scores - released + 4 * C * C * b + 4 * N * C * b
    )
    if mode != "off" and s.eager:
        # Recomputing eager attention: ln1 output and statistics, q/k/v (4 N C), then either the
        # rotary temporaries (4 N C) or the scores and probabilities with y and its copy.
        before = entering if mode == "blocks" else entering - mlp_half + grads_mlp_half
        recomputed = before + 6 * N * C * b + 2 * N * FP32 + 2 * max(N * C * b, scores)
        out[f"{name} recomputed attention"] = recomputed
    return out


def backward_moments(
    s: _Shape, modes: list[Checkpointing], config: TinyGPTConfig
) -> dict[str, int]:
    """Every named moment of the backward pass and the bytes alive at it.

    At large token counts the loss or the top block wins; when the activations are small next to
    the weights' gradients (few tokens, or checkpointing) a lower block or the embedding's
    gradient is the peak, so every block is scanned.

    Args:
        s: the step's sizes (batch, sequence, widths, bytes per element, eager or fused).
        modes: each block's checkpointing, from :func:`block_modes`.
        config: the model (its parameter count sizes the last moment).

    Returns:
        ``{moment: bytes alive}``, from ``"loss"`` and ``"head"`` down through each block
        (``"top block MLP"``, ``"block 0 qkv backward"``, ...) to ``"embedding"``; the largest
        value is the predicted peak.
    """
    N, C, M, V, b = s.N, s.C, s.M, s.V, s.b
    terms, shared = block_terms(s), shared_terms(s)
    keeps = {
        "off": sum(terms.values()),
        "blocks": N * C * b,  # only the block's input
        "attention": N * C * b + _mlp_half(s),  # its input and the MLP half's own saved set
    }
    kept = [keeps[m] for m in modes]
    saved = sum(shared.values()) + sum(kept)
    grads_head = V * C * b + 2 * C * b  # lm_head and the final LayerNorm
    grads_block = (4 * C + 4 * C * C + 2 * C * M) * b  # 2 LayerNorms, qkv + proj, up + down
    loss = saved + 2 * N * V * FP32 - INT64 * N  # two gradients of the log-probabilities
    moments = {
        "loss": loss,
        # lm_head's backward: the logits' gradient, its weight gradient and dx
        "head": loss - 2 * N * V * FP32 + V * C * b + N * C * b,
    }
    for i, mode in enumerate(modes):
        # Entering block i: what blocks 0..i kept, the gradients of the head and every block
        # above, and one (N, C) gradient flowing down (the size of ``embed``).
        entering = (
            shared["rope_masks"]
            + shared["embed"]
            + grads_head
            + sum(kept[: i + 1])
            + (s.L - 1 - i) * grads_block
        )
        moments.update(_block_moments(s, i, mode, entering, kept[i], terms))
    # The last moment: every weight has its gradient, plus the one flowing into the embedding.
    moments["embedding"] = parameter_count(config) * b + N * C * b
    return moments


def activation_bytes(
    config: TinyGPTConfig,
    batch_size: int,
    seq_len: int,
    dtype: torch.dtype = torch.float32,
    checkpointing: Checkpointing | bool | None = None,
) -> ActivationBreakdown:
    """Predict the peak bytes (above the weights) of ``model(**batch).loss.backward()``.

    The batch is full rows with no padding mask. What is saved per block is
    :func:`block_terms` (eager attention adds ``B H T²`` probabilities; sdpa saves ``B H T``
    log-sum-exp values instead), outside the blocks :func:`shared_terms`; a checkpointed block
    keeps only its input (``"attention"``: its input and its MLP half's saved set) and runs its
    forward again when the gradient reaches it. The peak is the largest moment of
    :func:`backward_moments`; ``peak_at`` names it. ``checkpointing=None`` uses the config's;
    blocks ``0, k, 2k, ...`` are checkpointed for ``config.checkpoint_every = k``.

    Checked against the CPU count to the byte (a constant 8-byte loss scalar aside) for eager and
    sdpa, 1-4 heads, MLP ratios 1, 2 and 4, vocabularies of 16-260 and ``checkpoint_every`` 1-3.

    Args:
        config: the model's shape, attention path and ``checkpoint_every``.
        batch_size: rows ``B``.
        seq_len: tokens per row ``T``, at most ``config.max_seq_len``.
        dtype: the model's floating dtype (``b`` bytes per element; the loss stays fp32).
        checkpointing: ``"off"``, ``"blocks"`` or ``"attention"`` (a bool means off/blocks);
            ``None``: the config's.

    Returns:
        :class:`ActivationBreakdown`; ``total`` is the predicted peak in bytes.

    Raises:
        ValueError: a size that is not a positive int, ``seq_len > config.max_seq_len``, a dtype
            that is not a floating ``torch.dtype``, or an unknown checkpointing mode.
    """
    positive_int("batch_size", batch_size)
    seq_len_within(seq_len, config.max_seq_len)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    mode = checkpointing_mode(config.checkpointing if checkpointing is None else checkpointing)
    c, b = config, torch.empty((), dtype=dtype).element_size()  # b: bytes per element
    s = _Shape(b, batch_size, seq_len, c.d_model, c.d_mlp, c.n_heads, c.n_layers, c.vocab_size,
               c.head_dim, c.attn_impl == "eager")  # fmt: skip
    modes = block_modes(mode, s.L, config.checkpoint_every)
    moments = backward_moments(s, modes, config)
    peak_at = max(moments, key=lambda name: moments[name])
    return _breakdown(s, mode, config.attn_impl, modes, moments[peak_at], peak_at)


def _breakdown(
    s: _Shape, mode: Checkpointing, attn_impl: str, modes: list[Checkpointing], total: int, at: str
) -> ActivationBreakdown:
    """Group the saved terms by component, as the lessons draw them."""
    N, C, b = s.N, s.C, s.b
    terms, shared = block_terms(s), shared_terms(s)
    n_full, n_attn, n_blocks = (modes.count(m) for m in ("off", "attention", "blocks"))
    parts = {
        "attention_scores": n_full * terms["scores"],
        "attention_qkv": n_full * terms["qkv"],
        "mlp_hidden": (n_full + n_attn) * terms["mlp"],
        # every plain block's norms, the attention-checkpointed blocks' ln2, the final norm
        "norms": n_full * terms["norms"] + (n_attn + 1) * (N * C * b + 2 * N * FP32),
        # plain blocks' residuals, the embedding output, the checkpointed blocks' inputs
        "residual_stream": n_full * terms["resid"]
        + shared["embed"]
        + n_blocks * N * C * b
        + n_attn * 2 * N * C * b,
        "rope_and_masks": shared["rope_masks"],
        "logits_and_loss": INT64 * N + N * s.V * FP32,
    }
    saved = sum(parts.values())
    return ActivationBreakdown(
        batch_size=s.B,
        seq_len=s.T,
        attn_impl=attn_impl,
        checkpointing=mode,
        saved_total=saved,
        backward_transient=total - saved,
        total=total,
        peak_at=at,
        **parts,
    )
