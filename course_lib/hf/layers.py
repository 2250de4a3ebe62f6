"""The decoder layers of the supported families as :mod:`~course_lib.hf.ops` ops.

One Llama-like layer covers every RMSNorm family, its differences read off :class:`Arch`
(``transformers`` 5.24 sources: ``modeling_llama.py``, ``modeling_qwen3.py``,
``modeling_gemma2.py``, ``modeling_gemma3.py``, ``modeling_phi3.py``, ``modeling_olmo2.py``,
``modeling_mixtral.py``):

* where the norms sit: before attention and MLP (Llama), after them (OLMo 2), or both (Gemma);
* how the norm applies its weight (``ops.rmsnorm``'s ``kind``), and a QK-norm per head (Qwen3,
  Gemma 3) or over the whole projection (OLMo 2);
* fused projections (Phi-3's ``qkv_proj`` split into views, ``gate_up_proj`` chunked);
* the gated activation (SiLU or tanh-GELU), attention soft-capping (Gemma 2, eager only), a
  sliding window per layer (its own mask), and a mixture of experts instead of the MLP.

GPT-2 (learned positions, LayerNorm, ``Conv1D``) keeps its own layer (:mod:`~course_lib.hf.gpt2`).
"""

from __future__ import annotations

from ..units import INT64
from .mlp import mlp
from .moe import moe_block
from .ops import Adapters, Ops
from .spec import Arch, StepSpec


def window_of(arch: Arch, layer: int) -> int:
    """The sliding window of ``layer`` (0: full attention).

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        layer: the layer's index.

    Returns:
        Its sliding window (0: full attention).
    """
    return arch.windows[layer] if arch.windows else 0


def rope_tables(ops: Ops, arch: Arch, spec: StepSpec) -> tuple[int, ...]:
    """RoPE's ``cos`` and ``sin``: one ``(1, seq_len, head_dim)`` row each per table (Gemma 3
    has a local and a global one), shared by all layers, and the ``position_ids`` they come from
    (int64; a checkpointed layer keeps them too). Returns ``(cos, sin, [cos, sin,] ids)``.

    Args:
        ops: the :class:`~course_lib.hf.ops.Ops` recording on the tape.
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.

    Returns:
        The ids of the cosine and sine tables (one pair per kind of layer).
    """
    e = 4 if arch.model_type == "olmo2" else ops.b  # OLMo 2 keeps its tables in fp32
    # packed rows come with position ids of their own, (batch, seq_len): one table row each
    rows = spec.batch_size if spec.documents else 1
    t, row = ops.tape, rows * spec.seq_len * (arch.rotary_dim or arch.head_dim) * e
    ids = t.tensor(spec.seq_len * INT64, False, "embeddings", "position_ids")
    rope = [t.tensor(row, False, "attention", "rotary_emb") for _ in range(2 * arch.rope_tables)]
    return (*rope, ids)


def layer_tables(arch: Arch, extra: tuple[int, ...], layer: int) -> tuple[int, int]:
    """The ``(cos, sin)`` pair ``layer`` is given: Gemma 3 hands each layer the table of its
    kind (``position_embeddings[layer_type]``), the others the one pair.

    Args:
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        extra: the RoPE tables.
        layer: the layer's index.

    Returns:
        The layer's ``(cos, sin)`` ids.
    """
    window = window_of(arch, layer)
    return (extra[0], extra[1]) if not window or arch.rope_tables == 1 else (extra[2], extra[3])


def causal_mask(ops: Ops, spec: StepSpec, window: int) -> int:
    """Eager attention's additive mask, ``(batch, 1, seq_len, seq_len)`` in the model's dtype,
    made from a boolean one (a sliding window's mask is made the same way); it lives through the
    forward pass (and a checkpointed layer keeps it until its backward is over).

    Args:
        ops: the :class:`~course_lib.hf.ops.Ops` recording on the tape.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.
        window: the sliding window (0: full attention).

    Returns:
        The mask's id.
    """
    t, T = ops.tape, spec.seq_len
    causal = t.tensor(T * T, False, "", "causal mask")  # kv_idx <= q_idx, bool
    mask = t.tensor(spec.batch_size * T * T * ops.b, False, "", "causal mask")  # where(...)
    t.drop(causal)
    del window
    return mask


def attention_masks(ops: Ops, arch: Arch, spec: StepSpec) -> dict[int, int]:
    """The masks the model builds once, by window (0: the causal one). Eager attention builds
    one for each kind of layer it has; sdpa and flash need none (sliding windows are refused
    there unless the window exceeds ``seq_len``, when ``transformers`` skips the mask).

    Args:
        ops: the :class:`~course_lib.hf.ops.Ops` recording on the tape.
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.

    Returns:
        Window -> mask id, for each kind of layer.
    """
    if not spec.eager:
        return {}
    kinds = sorted({window_of(arch, i) for i in range(arch.num_hidden_layers)})
    return {w: causal_mask(ops, spec, w) for w in kinds}


def decoder_layer(
    ops: Ops, arch: Arch, spec: StepSpec, name: str, x: int, extra: tuple[int, ...], mask: int,
    full: bool, ad: Adapters | None,
) -> int:  # fmt: skip
    """One decoder layer of a Llama-like family (module docstring), in the order it runs.

    Args:
        ops: the :class:`~course_lib.hf.ops.Ops` recording on the tape.
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.
        name: the layer's name (``layers.3``).
        x: the input tensor's id.
        extra: the layer's RoPE tables and other keyword tensors.
        mask: the attention masks by window (0: full attention).
        full: the base weights train (a full fine-tune).
        ad: the LoRA adapters (``None``: none).

    Returns:
        The output tensor's id.
    """
    t, C, nc = ops.tape, arch.hidden_size, ops.N * arch.hidden_size * ops.b
    pre, post = arch.layout in ("pre", "sandwich"), arch.layout in ("post", "sandwich")

    def norm(where, z):
        return ops.rmsnorm(
            f"{name}.{where}", "norms", z, C, f"{name}.{where}", full, kind=arch.norm
        )

    h = norm("input_layernorm", x) if pre else x
    a, weights = attention(ops, arch, spec, f"{name}.self_attn", h, extra, mask, full, ad)
    if h != x:
        t.drop(h)  # self_attn's argument goes when it returns
    if post:
        where = "post_attention_layernorm"
        a2 = norm(where, a)
        t.drop(a)
        a = a2
    x2 = ops.add(f"{name}.residual", "residual", x, a, nc)
    t.drop(a)
    if pre:
        where = (
            "pre_feedforward_layernorm" if arch.layout == "sandwich" else "post_attention_layernorm"
        )
        h2 = norm(where, x2)
    else:
        h2 = x2
    if arch.n_experts:
        down = moe_block(ops, arch, spec, f"{name}.mlp", h2, full, ad, int(name.split(".")[1]))
    else:
        down = mlp(ops, arch, f"{name}.mlp", h2, full, ad)
    if h2 != x2:
        t.drop(h2)
    if post:
        d2 = norm("post_feedforward_layernorm", down)
        t.drop(down)
        down = d2
    out = ops.add(f"{name}.residual", "residual", x2, down, nc)
    t.drop(x2, down, *weights)  # the layer's locals (eager's attention weights too) go
    return out


def _projection(
    ops: Ops,
    arch: Arch,
    att: str,
    h: int,
    full: bool,
    ad: Adapters | None,
    p: str,
    n_out: int,
) -> int:
    """One of ``q_proj``, ``k_proj``, ``v_proj`` (a LoRA adapter if ``p`` is a target)."""
    return ops.project(
        f"{att}.{p}", "attention", h, arch.hidden_size, n_out, full, arch.qkv_bias, ad
    )


def _fused_qkv(
    ops: Ops, arch: Arch, att: str, h: int, full: bool, ad: Adapters | None
) -> tuple[int, int, int, int]:
    """Phi-3's one ``qkv_proj``, sliced into three views; each slice's backward pays a
    full-size zero-filled buffer. Returns ``(q, k, v, qkv)``."""
    C, d, H, K = arch.hidden_size, arch.head_dim, arch.num_attention_heads, arch.num_key_value_heads
    w = (H + 2 * K) * d
    qkv = ops.project(f"{att}.qkv_proj", "attention", h, C, w, full, arch.qkv_bias, ad)
    views = []
    for _ in range(3):
        (v,) = ops.tape.op(att, "attention", [qkv], [0], (), ops._dx(ops.N * w * ops.b))
        views.append(ops.tape.view(v, qkv))
    return views[0], views[1], views[2], qkv


def _qk_norm(ops: Ops, arch: Arch, att: str, z: int, n: int, which: str, full: bool) -> int:
    """A QK-norm: per head on the ``(B, T, n, d)`` view (Qwen3, Gemma 3), or over the whole
    projection (OLMo 2, whose view follows)."""
    d, nb = arch.head_dim, ops.N * n * arch.head_dim * ops.b
    if arch.qk_norm == "full":
        return ops.rmsnorm(f"{att}.{which}", "norms", z, n * d, f"{att}.{which}", full,
                           kind=arch.norm)  # fmt: skip
    zc = ops.view_copy(att, "attention", z, nb)
    return ops.rmsnorm(f"{att}.{which}", "norms", zc, n * d, f"{att}.{which}", full, groups=n,
                       kind=arch.norm, wsize=d)  # fmt: skip


def _rotated_qk(
    ops: Ops,
    arch: Arch,
    att: str,
    h: int,
    extra: tuple[int, ...],
    full: bool,
    ad: Adapters | None,
) -> tuple[int, int, int, list[int]]:
    """q, k and v as each family makes them, in its order (node order is backward order):

    * no QK-norm: the three projections (or Phi-3's fused one), then RoPE on q, then k;
    * Qwen3 and OLMo 2: ``q_norm(q_proj(x))``, ``k_norm(k_proj(x))``, ``v_proj(x)``, RoPE;
    * Gemma 3: the three projections, ``q_norm``, ``k_norm``, RoPE.

    ``apply_rotary_pos_emb`` returns both, so what they replace goes only after both.
    Returns ``(q rotated, k rotated, v, [tensors the attention still holds])``."""
    t, d = ops.tape, arch.head_dim
    H, K = arch.num_attention_heads, arch.num_key_value_heads
    cos, sin = layer_tables(arch, extra, int(att.split(".")[1]))
    wide = 4 if arch.model_type == "olmo2" and ops.b != 4 else 0
    held: list = []
    if arch.fused:
        q, k, v, qkv = _fused_qkv(ops, arch, att, h, full, ad)
        held = [qkv]
    elif arch.qk_norm and arch.qk_norm_each:  # Qwen3, OLMo 2
        q = _projection(ops, arch, att, h, full, ad, "q_proj", H * d)
        qn = _qk_norm(ops, arch, att, q, H, "q_norm", full)
        t.drop(q)
        k = _projection(ops, arch, att, h, full, ad, "k_proj", K * d)
        kn = _qk_norm(ops, arch, att, k, K, "k_norm", full)
        t.drop(k)
        v = _projection(ops, arch, att, h, full, ad, "v_proj", K * d)
        q, k = qn, kn
    else:
        q, k, v = (_projection(ops, arch, att, h, full, ad, p, n * d)
                   for p, n in (("q_proj", H), ("k_proj", K), ("v_proj", K)))  # fmt: skip
        if arch.qk_norm:  # Gemma 3: each norm replaces its projection
            qn = _qk_norm(ops, arch, att, q, H, "q_norm", full)
            t.drop(q)
            kn = _qk_norm(ops, arch, att, k, K, "k_norm", full)
            t.drop(k)
            q, k = qn, kn
    rotated = []
    for z, n in ((q, H), (k, K)):
        if arch.qk_norm == "head":
            zv = z  # the norm's output is already the (B, T, n, d) view
        else:
            # (B, T, n*d) -> (B, n, T, d) are views, but the gradients come back from RoPE in
            # (B, n, T, d) order and are copied to be viewed as (B, T, n*d) again.
            zv = ops.view_copy(att, "attention", z, ops.N * n * d * ops.b)
        rotated.append(ops.rope(f"{att}.rope", "attention", zv, n * d, cos, sin, wide, arch.fused))
    if not arch.fused:
        t.drop(q, k)
    return rotated[0], rotated[1], v, held


def attention(
    ops: Ops, arch: Arch, spec: StepSpec, att: str, h: int, extra: tuple[int, ...], mask: int,
    full: bool, ad: Adapters | None,
) -> tuple[int, tuple[int, ...]]:  # fmt: skip
    """q, k, v projections, QK-norm, RoPE, attention (sdpa, flash, or eager with ``repeat_kv``),
    ``o_proj``. Returns the output and the attention weights it hands back (eager only).

    Args:
        ops: the :class:`~course_lib.hf.ops.Ops` recording on the tape.
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.
        att: the attention block's name.
        h: the normalised input's id.
        extra: the layer's RoPE tables and other keyword tensors.
        mask: the attention masks by window (0: full attention).
        full: the base weights train (a full fine-tune).
        ad: the LoRA adapters (``None``: none).

    Returns:
        ``(output id, tensors held until the layer returns)``.
    """
    t, N, b, C, d = ops.tape, ops.N, ops.b, arch.hidden_size, arch.head_dim
    H, K = arch.num_attention_heads, arch.num_key_value_heads
    nq, nkv = N * H * d * b, N * K * d * b
    qe, ke, v, fused = _rotated_qk(ops, arch, att, h, extra, full, ad)
    if spec.eager:
        kr, vr = ke, ops.view_copy(att, "attention", v, nkv)
        # repeat_kv: expand (its backward sums the copies), then a reshape that copies only
        # when each of several key/value heads is repeated (one kv head stays a stride-0 view).
        repeat_copies = H != K and K > 1
        if H != K:
            kr, vr = (_repeat_kv(ops, att, z, nkv, nq if repeat_copies else 0) for z in (kr, vr))
        # matmul folds (B, H, ...) into one batch dimension: a copy for more than one row
        # (the heads of a row are interleaved with its tokens), unless repeat_kv made it.
        rows = spec.batch_size > 1
        o, probs = ops.eager_attention(
            f"{att}.attention", "attention", qe, kr, vr, H, d, mask, True,
            rows and not repeat_copies, arch.attn_softcap, copy_q=rows,
        )  # fmt: skip
        # (B*H, T, d) -> (B, H, T, d) -> transpose(1, 2).contiguous(): a copy, and the view's
        # backward copies the transposed gradient.
        oc = ops.copy(att, "attention", ops.view_copy(att, "attention", o, nq), nq)
        t.drop(o, *((kr, vr) if H != K else ()))
    elif spec.flash:
        oc = ops.flash(f"{att}.flash", "attention", qe, ke, v, H, K, d, spec.documents)
    elif mask >= 0:  # sdpa with packed documents: a mask, so repeat_kv instead of enable_gqa
        kr, vr = ke, v
        if H != K:
            kr, vr = (_repeat_kv(ops, att, z, nkv, nq if K > 1 else 0) for z in (ke, v))
        oc = ops.sdpa_masked(f"{att}.sdpa", "attention", qe, kr, vr, H, d, mask)
        if H != K:
            t.drop(kr, vr)
    else:
        oc = ops.sdpa(f"{att}.sdpa", "attention", qe, ke, v, H, K, d)
    if not spec.eager and not spec.flash and arch.fused and not ops.cuda:
        # Phi-3's RoPE ends in torch.cat, so q is contiguous as (B, H, T, d); the CPU
        # kernel lays its output out like q, and transpose(1, 2).contiguous() copies it
        # (Llama-like q keeps the projection's (B, T, H, d) order: no copy there)
        out = oc
        oc = ops.copy(att, "attention", out, nq)
        t.drop(out)
    a = ops.project(f"{att}.o_proj", "attention", oc, H * d, C, full, arch.o_bias, ad)
    t.drop(oc, qe, ke, v, *fused)  # the attention's locals go when it returns
    return a, ((probs,) if spec.eager else ())


def _repeat_kv(ops: Ops, att: str, kv: int, nkv: int, nq: int) -> int:
    """``kv[:, :, None].expand(...).reshape(B, H, T, d)``: a view whose backward sums over the
    copies, then (``nq`` bytes) a copy whose backward passes the gradient on."""
    kv = ops.expand_sum(att, "attention", kv, nkv)
    return ops.copy(att, "attention", kv, nq) if nq else kv
