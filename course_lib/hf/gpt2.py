"""GPT-2's block as :mod:`~course_lib.hf.ops` ops (``transformers`` 5.24 ``modeling_gpt2.py``):
learned positions, LayerNorm, a fused ``c_attn`` split into views, and ``Conv1D`` projections
(each an ``addmm`` with a bias)."""

from __future__ import annotations

from ..units import INT64
from .ops import Adapters, Ops
from .spec import Arch, StepSpec


def gpt2_positions(ops: Ops, arch: Arch, x: int, full: bool) -> tuple[int, tuple[int, ...], int]:
    """``wte(ids) + wpe(position_ids)``: the position table's gradient is all of it
    (``max_position_embeddings x hidden``), and the sum's backward reduces the gradient over the
    batch for it. Returns the sum, ``(position_ids,)`` and the position embeddings.

    Args:
        ops: the :class:`~course_lib.hf.ops.Ops` recording on the tape.
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        x: the input tensor's id.
        full: the base weights train (a full fine-tune).

    Returns:
        ``(hidden states id, extra tensors, mask id)``.
    """
    t, T, C, b = ops.tape, ops.T, arch.hidden_size, ops.b
    pos = t.tensor(T * INT64, False, "embeddings", "position_ids")
    table = [("param", "wpe", arch.max_position_embeddings * C * b)]
    (pe,) = t.op("wpe", "embeddings", [], [T * C * b], (pos,), table, full)
    prog = [("grad", 0, "g"), ("new", "d1", T * C * b), ("grad", 1, "d1")]
    (h,) = t.op("embeddings", "embeddings", [x, pe], [ops.N * C * b], (), prog)
    return h, (pos,), pe


def gpt2_layer(
    ops: Ops, arch: Arch, spec: StepSpec, name: str, x: int, extra: tuple[int, ...], mask: int,
    full: bool, ad: Adapters | None,
) -> int:  # fmt: skip
    """``GPT2Block`` as ops: LayerNorm, fused ``c_attn``, attention, ``c_proj``, LayerNorm,
    ``c_fc``, tanh-GELU, ``c_proj`` (every ``Conv1D`` is an ``addmm`` with a bias).

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
    t, N, b = ops.tape, ops.N, ops.b
    C, M, H = arch.hidden_size, arch.intermediate_size, arch.num_attention_heads
    d, nc = arch.head_dim, ops.N * arch.hidden_size * ops.b
    att, mlp_ = f"{name}.attn", f"{name}.mlp"

    def lin(where: str, x_: int, n_in: int, n_out: int, module: str) -> int:
        comp = "attention" if where.startswith(att) else "mlp"
        return ops.project(where, comp, x_, n_in, n_out, full, True, ad)  # module: where's end

    h = ops.layernorm(f"{name}.ln_1", "norms", x, C, f"{name}.ln_1", full)
    qkv = lin(f"{att}.c_attn", h, C, 3 * C, "c_attn")
    # split(): three views; its backward concatenates the three gradients (3 N C).
    q, k, v = (
        t.view(z, qkv)
        for z in t.op(f"{att}.split", "attention", [qkv], [0, 0, 0], (), ops._dx(3 * nc))
    )
    if spec.eager:  # the gradients come back as (B, H, T, d): each view's backward copies
        k, v, q = (ops.view_copy(att, "attention", z, nc) for z in (k, v, q))
        rows = spec.batch_size > 1  # matmul's fold copies q, k and v (layers.attention)
        o, probs = ops.eager_attention(
            f"{att}.attention", "attention", q, k, v, H, d, mask, False, rows, copy_q=rows
        )
        oc = ops.copy(att, "attention", ops.view_copy(att, "attention", o, nc), nc)
        t.drop(o)
    elif spec.flash:
        oc = ops.flash(f"{att}.flash", "attention", q, k, v, H, H, d)
    else:
        oc = ops.sdpa(f"{att}.sdpa", "attention", q, k, v, H, H, d)
    a = lin(f"{att}.c_proj", oc, C, C, "c_proj")
    t.drop(oc, qkv, q, k, v)  # the attention's locals go when it returns
    x2 = ops.add(f"{name}.residual", "residual", a, x, nc)
    t.drop(h)  # (attn_output stays in a local until the block returns)
    h2 = ops.layernorm(f"{name}.ln_2", "norms", x2, C, f"{name}.ln_2", full)
    up = lin(f"{mlp_}.c_fc", h2, C, M, "c_fc")
    if arch.activation == "gelu_new":
        act = ops.gelu_tanh(f"{mlp_}.act", "mlp", up, M)
    else:  # one fused op: saves its input
        (act,) = t.op(f"{mlp_}.act", "mlp", [up], [N * M * b], (up,), ops._dx(N * M * b))
    t.drop(up)
    down = lin(f"{mlp_}.c_proj", act, M, C, "c_proj")
    t.drop(act)
    out = ops.add(f"{name}.residual", "residual", x2, down, nc)
    t.drop(x2, down, h2, a, *((probs,) if spec.eager else ()))  # attn_output, _ = self.attn(...)
    return out
