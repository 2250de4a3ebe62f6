"""The MLP of the Llama-like families as :mod:`~course_lib.hf.ops` ops: gated (SiLU or
tanh-GELU), with separate ``gate_proj`` and ``up_proj`` or Phi-3's fused ``gate_up_proj``
(``transformers`` 5.24, ``LlamaMLP`` and ``Phi3MLP``)."""

from __future__ import annotations

from .ops import Adapters, Ops
from .spec import Arch


def mlp(ops: Ops, arch: Arch, name: str, h2: int, full: bool, ad: Adapters | None) -> int:
    """``down_proj(act(gate_proj(x)) * up_proj(x))`` (Phi-3: ``gate_up_proj``, chunked): the
    activation keeps its input, the product both of its factors (four ``N x intermediate``
    tensors in all).

    Args:
        ops: the :class:`~course_lib.hf.ops.Ops` recording on the tape.
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        name: the layer's name (``layers.3``).
        h2: the normalised input's id.
        full: the base weights train (a full fine-tune).
        ad: the LoRA adapters (``None``: none).

    Returns:
        The output tensor's id.
    """
    t, C, M, bias = ops.tape, arch.hidden_size, arch.intermediate_size, arch.mlp_bias
    nm = ops.N * M * ops.b

    def proj(p: str, x: int, n_in: int, n_out: int) -> int:
        return ops.project(f"{name}.{p}", "mlp", x, n_in, n_out, full, bias, ad)

    if arch.fused:  # gate, up = gate_up_proj(x).chunk(2); up * act(gate)
        gu = proj("gate_up_proj", h2, C, 2 * M)
        gate, up = (t.view(t.op(name, "mlp", [gu], [0], (), ops._dx(2 * nm))[0], gu) for _ in "gu")
        (act,) = t.op(f"{name}.act_fn", "mlp", [gate], [nm], (gate,), ops._dx(nm))
        prod = ops.mul(f"{name}.up * act_fn", "mlp", up, act, nm)
        t.drop(act, gu)
    else:
        gate = proj("gate_proj", h2, C, M)
        (act,) = t.op(f"{name}.act_fn", "mlp", [gate], [nm], (gate,), ops._dx(nm))
        t.drop(gate)
        up = proj("up_proj", h2, C, M)
        prod = ops.mul(f"{name}.act_fn * up_proj", "mlp", act, up, nm)
        t.drop(act, up)
    down = proj("down_proj", prod, M, C)
    t.drop(prod)
    return down
