"""Norms as recorded ops: RMSNorm (Llama, OLMo 2 and Gemma ways of applying the weight, and
per-head QK-norms), a norm's weight product and ``nn.LayerNorm``.

A mixin of :class:`~course_lib.hf.ops.Ops` (the same conventions: sizes in bytes, ``N =
batch_size * seq_len`` tokens, ``b`` bytes per element of the model's dtype).
"""

from __future__ import annotations

from collections.abc import Callable

from ..units import FP32
from .tape import Tape


class NormOps:
    """The norm ops of :class:`~course_lib.hf.ops.Ops`."""

    tape: Tape
    N: int
    b: int
    cuda: bool
    # the Ops methods these recipes call (defined on Ops, the class that mixes this in)
    _dx: Callable[..., list[tuple]]
    to: Callable[..., int]

    def rmsnorm(
        self,
        where: str,
        comp: str,
        x: int,
        C: int,
        pid: str,
        trainable: bool,
        groups: int = 1,
        kind: str = "llama",
        wsize: int = 0,
    ) -> int:
        """RMSNorm over ``C`` features (``groups`` norms per token: a per-head QK-norm), op by
        op: ``x32 = x.to(fp32)``; ``x32 * rsqrt(x32.pow(2).mean(-1) + eps)`` in fp32; then the
        weight, three ways: ``"llama"`` ``weight * h.to(dtype)``; ``"olmo2"`` ``(weight *
        h).to(dtype)``; ``"gemma"`` ``(h * (1 + weight.float())).type_as(x)``. Saves the fp32
        input (twice over: ``pow`` and the product), the fp32 ``rsqrt`` per row, and what the
        weight's product needs.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            C: the normalised width.
            pid: the weight's parameter name.
            trainable: the weight trains.
            groups: rows the norm runs over (QK-norm: per head).
            kind: how the weight applies (``"llama"``, ``"olmo2"``, ``"gemma"``).
            wsize: the weight's element size.

        Returns:
            The output tensor's id.
        """
        t, N, b = self.tape, self.N, self.b
        R = N * groups  # rows normalised
        n32 = N * C * FP32
        x32 = self.to(where, comp, x, C, FP32)
        sq_bwd = [("new", "a", n32), ("new", "b", n32)] + self._dx(n32)
        (sq,) = t.op(where, comp, [x32], [n32], (x32,), sq_bwd)
        (mean,) = t.op(where, comp, [sq], [R * FP32], (), self._dx(n32))
        t.drop(sq)
        (var,) = t.op(where, comp, [mean], [R * FP32], (), [("grad", 0, "g")])
        t.drop(mean)
        rs_bwd = [("new", "a", R * FP32), ("new", "b", R * FP32)] + self._dx(R * FP32)
        (rs,) = t.op(where, comp, [var], [R * FP32], ("out",), rs_bwd)
        t.drop(var)
        h_bwd = self._dx(n32, 0) + [("new", "t", n32)] + self._dx(R * FP32, 1)
        (h,) = t.op(where, comp, [x32, rs], [n32], (x32, rs), h_bwd + [("del", "t")])
        if x32 != x:
            t.drop(x32)
        t.drop(rs)
        if kind == "llama":
            h_b = self.to(where, comp, h, C, b, src=FP32)
            if h_b != h:
                t.drop(h)
            return self.weight_mul(where, comp, h_b, C, pid, trainable, wsize=wsize)
        if kind == "olmo2":
            out = self.weight_mul(where, comp, h, C, pid, trainable, FP32, wsize)
        else:
            out = self._gemma_scale(where, comp, h, C, pid, trainable, wsize)
        res = self.to(where, comp, out, C, b, src=FP32)
        if res != out:
            t.drop(out)
        return res

    def _gemma_scale(
        self, where: str, comp: str, h: int, C: int, pid: str, trainable: bool, wsize: int = 0
    ) -> int:
        """``h * (1.0 + weight.float())`` in fp32: ``weight.float()`` (a copy unless fp32) and
        ``1 + w`` are ``C``-sized; the product keeps ``1 + w`` (and ``h`` if the weight trains);
        the weight's gradient is ``(g * h)`` summed over tokens, through a full-size temporary,
        then cast back to the weight's dtype."""
        t, N, b = self.tape, self.N, self.b
        W = wsize or C
        wc = [("param", pid, W * b)] if trainable else []  # the cast's backward: the grad
        if b != FP32:  # weight.float(): a copy, whose backward casts the gradient back
            (w,) = t.op(where, comp, [], [W * FP32], (), wc, trainable)
            (w1,) = t.op(where, comp, [w], [W * FP32], (), [("grad", 0, "g")] * trainable)
            t.drop(w)
        else:  # already fp32: 1 + weight reads the parameter itself
            (w1,) = t.op(where, comp, [], [W * FP32], (), wc, trainable)
        n32 = N * C * FP32
        program = self._dx(n32, 0) if t.grad(h) else []
        if trainable:
            program += [("new", "t", n32), ("new", "d1", W * FP32), ("del", "t"), ("grad", 1, "d1")]
        saves = (w1, h) if trainable else (w1,)
        (out,) = t.op(where, comp, [h, w1], [n32], saves, program)
        t.drop(h, w1)
        return out

    def weight_mul(
        self,
        where: str,
        comp: str,
        h: int,
        C: int,
        pid: str,
        trainable: bool,
        e: int | None = None,
        wsize: int = 0,
    ) -> int:
        """``weight * h`` (a norm's scale) on ``e``-byte elements (default: the model's): the
        weight's gradient is ``(g * h).sum()``, made through a full-size temporary; ``h`` is
        saved only if the weight trains.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            h: the normalised tensor's id.
            C: the width.
            pid: the weight's parameter name.
            trainable: the weight trains.
            e: element size of ``h``.
            wsize: the weight's element size.

        Returns:
            The output tensor's id.
        """
        t, N, b = self.tape, self.N, self.b if e is None else e
        program = self._dx(N * C * b) if t.grad(h) else []
        if trainable:
            wb = self.b  # the parameter's own dtype
            program += [("new", "t", N * C * b), ("param", pid, (wsize or C) * wb), ("del", "t")]
        (out,) = t.op(where, comp, [h], [N * C * b], (h,) if trainable else (), program, trainable)
        t.drop(h)
        return out

    def layernorm(self, where: str, comp: str, x: int, C: int, pid: str, trainable: bool) -> int:
        """``nn.LayerNorm`` (``native_layer_norm``): saves the input and a mean and a reciprocal
        standard deviation per token (the input's dtype on the CPU); the backward makes the
        input's, the weight's and the bias's gradients.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            C: the normalised width.
            pid: the weight's parameter name.
            trainable: weight and bias train.

        Returns:
            The output tensor's id.
        """
        t, N, b = self.tape, self.N, self.b
        program = self._dx(N * C * b) if t.grad(x) else []
        if trainable:
            program += [("param", pid, C * b), ("param", pid + ".bias", C * b)]
        e = FP32 if self.cuda else b  # mean, rstd: the input's dtype on the CPU, fp32 on CUDA
        stats = [t.tensor(N * e, False, comp, where) for _ in "mr"]
        (out,) = t.op(where, comp, [x], [N * C * b], (x, *stats), program, trainable)
        t.drop(*stats)
        return out
