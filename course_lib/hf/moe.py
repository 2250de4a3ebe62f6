"""A mixture-of-experts block (Mixtral) as ops: the router and the routed experts.

``transformers`` 5.24, ``modeling_mixtral.py`` and ``integrations/moe.py``. The router is
``F.linear`` to ``E`` logits, a softmax in fp32, ``topk`` and an in-place renormalisation of the
``k`` weights. The experts are two 3-D parameters (``gate_up_proj``: ``E x 2M x C``,
``down_proj``: ``E x C x M``), run one of two ways (``experts_implementation``):

* ``"grouped_mm"`` (the default wherever ``torch`` has ``grouped_mm``: the CPU, and CUDA from
  compute capability 8.0): the ``S = tokens x k`` (token, expert) pairs are sorted by expert
  and each projection is one grouped matmul over all of them. Every tensor is sized by ``S``:
  the routing decides which expert sees which row, never how many bytes there are.
* ``"eager"`` (the loop): for each expert that received tokens, its rows are gathered and put
  through its own matmuls. The tensors kept for backward still add up to ``S`` rows over the
  experts, but each expert's transients are its own ``n_e`` rows: the peak follows the most
  loaded expert. ``StepSpec.expert_tokens`` gives ``n_e`` per layer (:func:`routing`).

Neither PEFT's ``"all-linear"`` nor its Mixtral default targets the router or the experts (3-D
parameters and a plain ``nn.Parameter`` router are not ``nn.Linear``): LoRA trains attention.
"""

from __future__ import annotations

from ..units import FP32, INT64
from .ops import Adapters, Ops
from .spec import Arch, StepSpec

INT32 = 4  # bytes of an int32 element: the experts' offsets
IMPLEMENTATIONS = ("grouped_mm", "eager")  # "eager" is refused (_eager_experts)


def routing(n_tokens: int, n_experts: int, top_k: int, case: str = "worst") -> tuple[int, ...]:
    """Tokens each expert receives in one layer for ``n_tokens`` tokens: ``"worst"`` (every
    token routed to the same ``top_k`` experts) or ``"uniform"`` (the ``n_tokens x top_k``
    pairs spread as evenly as they go, the expected load of a balanced router).

    Args:
        n_tokens: tokens routed.
        n_experts: experts per layer.
        top_k: experts per token.
        case: ``"worst"`` or ``"uniform"``.

    Returns:
        Tokens per expert.

    Raises:
        ValueError: another ``case``.
    """
    if case == "worst":
        return tuple(n_tokens if e < top_k else 0 for e in range(n_experts))
    if case == "uniform":
        pairs = n_tokens * top_k
        return tuple(pairs // n_experts + (e < pairs % n_experts) for e in range(n_experts))
    raise ValueError(f"routing case {case!r} is not 'worst' or 'uniform'")


def router(ops: Ops, arch: Arch, name: str, h: int, full: bool) -> tuple[int, tuple[int, int], int]:
    """``MixtralTopKRouter``: logits, fp32 softmax, ``topk``, ``weights /= weights.sum()``.
    Returns ``(logits, (weights, their base), indices)``: the block keeps the logits
    (``_``) until it returns.

    Args:
        ops: the :class:`~course_lib.hf.ops.Ops` recording on the tape.
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        name: the layer's name (``layers.3``).
        h: the normalised input's id.
        full: the base weights train (a full fine-tune).

    Returns:
        ``(router logits id, (weights id, indices id), scores id)``.
    """
    t, N, b = ops.tape, ops.N, ops.b
    C, E, k = arch.hidden_size, arch.n_experts, arch.top_k
    logits = ops.matmul(f"{name}.gate", "mlp", h, C, E, f"{name}.gate", full)
    l32 = logits if b == FP32 else ops._to_n(f"{name}.gate", "mlp", logits, N * E, FP32)
    (probs,) = t.op(f"{name}.gate", "mlp", [l32], [N * E * FP32], ("out",), ops._dx(N * E * FP32))
    if l32 != logits:
        t.drop(l32)
    # topk keeps its indices; its backward scatters the gradient into zeros (out of place)
    prog = [("new", "z", N * E * FP32), ("new", "d0", N * E * FP32), ("del", "z"),
            ("grad", 0, "d0")]  # fmt: skip
    vals, idx = t.op(f"{name}.gate", "mlp", [probs], [N * k * FP32, N * k * INT64], ("out1",), prog)
    t.drop(probs)
    (total,) = t.op(f"{name}.gate", "mlp", [vals], [N * FP32], (), [("grad", 0, "g")])
    # in-place division: autograd keeps a clone of the weights before it, and the divisor.
    # Its backward makes -grad * ((w / s) / s) for s (three temporaries on the way), then
    # grad / s for the weights; the engine then sums the first down to s's shape.
    nk = N * k * FP32
    orig = t.tensor(nk, False, "mlp", f"{name}.gate (weights before /=)")
    prog = [("new", "a", nk), ("new", "a2", nk), ("new", "n", nk), ("new", "m", nk),
            ("del", "a"), ("del", "a2"), ("del", "n"), ("new", "d0", nk),
            ("new", "d1", N * FP32), ("del", "m"),
            ("grad", 0, "d0"), ("grad", 1, "d1")]  # fmt: skip
    (w,) = t.op(f"{name}.gate", "mlp", [vals, total], [0], (orig, total), prog)
    t.view(w, vals)
    t.drop(orig, total)
    return logits, (w, vals), idx


def moe_block(
    ops: Ops,
    arch: Arch,
    spec: StepSpec,
    name: str,
    h: int,
    full: bool,
    ad: Adapters | None,
    layer: int,
) -> int:
    """``MixtralSparseMoeBlock`` on ``h`` (module docstring); returns its output.

    Args:
        ops: the :class:`~course_lib.hf.ops.Ops` recording on the tape.
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.
        name: the layer's name (``layers.3``).
        h: the normalised input's id.
        full: the base weights train (a full fine-tune).
        ad: the LoRA adapters (``None``: none).
        layer: the layer's index (its routed tokens).

    Returns:
        The output tensor's id.

    Raises:
        ValueError: ``experts="eager"``, which is not modelled.
    """
    del ad  # neither the router nor the experts take a LoRA adapter
    impl = spec.experts
    logits, (w, vals), idx = router(ops, arch, name, h, full)
    if impl == "eager":
        counts = spec.expert_tokens[layer] if spec.expert_tokens else None
        out = _eager_experts(ops, arch, name, h, w, idx, full, counts)
    else:
        out = _grouped_experts(ops, arch, name, h, w, idx, full)
    ops.tape.drop(logits, w, vals, idx)  # the block's locals go when it returns
    return out


def _grouped(
    ops: Ops,
    name: str,
    x: int,
    rows: int,
    n_in: int,
    n_out: int,
    n_experts: int,
    offsets: int,
    full: bool,
    b: int,
) -> int:
    """One ``grouped_mm`` over ``rows`` sorted rows: keeps its input (when the experts train)
    and the offsets; its backward makes the weight's gradient (all experts), then the
    input's."""
    t = ops.tape
    prog: list[tuple] = [("param", name, n_experts * n_in * n_out * b)] if full else []
    if t.grad(x):
        prog += [("new", "dx", rows * n_in * b), ("grad", 0, "dx")]
    saves = (x, offsets) if full else (offsets,)
    mm = 2 * rows * n_in * n_out
    t.count(mm, mm * (t.grad(x) + full), b)
    (out,) = t.op(name, "mlp", [x], [rows * n_out * b], saves, prog, full)
    return out


def _grouped_experts(ops: Ops, arch: Arch, name: str, h: int, w: int, idx: int, full: bool) -> int:
    """``grouped_mm_experts_forward``: sort the pairs by expert, gather their rows, two
    grouped projections, weight by the router, restore the order, sum the ``k`` copies."""
    t, N, b = ops.tape, ops.N, ops.b
    C, M, E, k = arch.hidden_size, arch.moe_intermediate, arch.n_experts, arch.top_k
    S = N * k
    ids_sorted, perm = (t.tensor(S * INT64, False, "mlp", f"{name} sort") for _ in "ip")
    rows = t.tensor(S * INT64, False, "mlp", f"{name} perm // k")
    # hidden_states[perm // k]: its backward scatters into zeros (out of place)
    gather = [("new", "z", N * C * b), ("new", "d0", N * C * b), ("del", "z"), ("grad", 0, "d0")]
    (xs,) = t.op(f"{name}.experts", "mlp", [h], [S * C * b], (rows,), gather)
    t.drop(rows)
    pick = [("new", "z", S * FP32), ("new", "d0", S * FP32), ("del", "z"), ("grad", 0, "d0")]
    (ws,) = t.op(f"{name}.experts", "mlp", [w], [S * FP32], (perm,), pick)
    hist_in = t.tensor(S * FP32, False, "mlp", f"{name} histc input")
    counts = t.tensor(E * FP32, False, "mlp", f"{name} histc")
    offsets = t.tensor(E * INT32, False, "mlp", f"{name} offsets")
    gu = _grouped(ops, f"{name}.experts.gate_up_proj", xs, S, C, 2 * M, E, offsets, full, b)
    # (the function's locals, named as in transformers, live until it returns; proj_out is
    # rebound three times: gate_up's output, the gated product, down's output)
    act, prod = _gate(ops, name, gu, S, M, b)
    t.drop(gu, act)
    down = _grouped(ops, f"{name}.experts.down_proj", prod, S, M, C, E, offsets, full, b)
    t.drop(prod)
    # proj_out * weights: fp32 (the router's weights are); the backward casts back
    sc = S * C
    # MulBackward: grad * proj_out (for the weights) and grad * weights, both fp32; then the
    # engine (validate_outputs) casts the second to the model's dtype and sums the first down
    # to (S, 1). In a checkpointed layer the unpacked inputs die before that.
    back = [("new", "q", sc * FP32), ("new", "p", sc * FP32), ("release", 0), ("release", 1)]
    back += [("new", "d0", sc * b), ("del", "p")] if b != FP32 else []
    back += [("new", "d1", S * FP32), ("del", "q")]
    back += [("grad", 0, "d0" if b != FP32 else "p"), ("grad", 1, "d1")]
    (weighted,) = t.op(f"{name}.experts", "mlp", [down, ws], [sc * FP32], (down, ws), back)
    inv = t.tensor(S * INT64, False, "mlp", f"{name} inverse perm")
    ar = t.tensor(S * INT64, False, "mlp", f"{name} arange")
    t.drop(ar)
    # weighted_out[inv_perm]: zeros, then index_put out of place
    scatter = [("new", "z", sc * FP32), ("new", "d0", sc * FP32), ("del", "z"), ("grad", 0, "d0")]
    (ordered,) = t.op(f"{name}.experts", "mlp", [weighted], [sc * FP32], (inv,), scatter)
    t.drop(weighted)
    # .view(tokens, k, C).sum(1): the sum's gradient is expanded over k (a stride-0 view),
    # which the view's backward has to copy to reshape
    folded = ops.view_copy(f"{name}.experts", "mlp", ordered, sc * FP32)
    (summed,) = t.op(f"{name}.experts", "mlp", [folded], [N * C * FP32], (), [("grad", 0, "g")])
    out = summed if b == FP32 else ops._to_n(f"{name}.experts", "mlp", summed, N * C, b, src=FP32)
    if out != summed:
        t.drop(summed)
    t.drop(ids_sorted, perm, xs, ws, hist_in, counts, offsets, down, inv, ordered)
    return out


def _gate(ops: Ops, name: str, gu: int, rows: int, M: int, b: int) -> tuple[int, int]:
    """``act(gate) * up`` on the two halves of ``gu`` (views): the activation keeps its
    input, the product both factors; the halves' gradients are concatenated."""
    t = ops.tape
    n = rows * M * b
    gate, up = t.op(name, "mlp", [gu], [0, 0], (), [("new", "c", 2 * n), ("grad", 0, "c")])
    t.view(gate, gu)
    t.view(up, gu)
    (act,) = t.op(f"{name}.act_fn", "mlp", [gate], [n], (gate,), ops._dx(n))
    prod = ops.mul(f"{name}.act_fn * up", "mlp", act, up, n)
    return act, prod


def _eager_experts(
    ops: Ops,
    arch: Arch,
    name: str,
    h: int,
    w: int,
    idx: int,
    full: bool,
    counts: tuple[int, ...] | None,
) -> int:
    raise ValueError(
        "experts='eager' (transformers' per-expert loop) is not modelled: its one-hot masks, "
        "nonzero indices and, for a full fine-tune, a full-size zero gradient per expert make "
        "it routing-dependent in ways not yet recorded; use experts='grouped_mm' (the default)"
    )
