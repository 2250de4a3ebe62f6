"""The ops of a Hugging Face decoder, recorded on a :class:`~course_lib.hf.tape.Tape`.

Each method is one PyTorch op (or a fixed group of them) as the installed stack runs it on the
CPU: the tensors it allocates in the forward pass, the autograd node it creates, what that node
saves (which depends on which inputs need a gradient: a frozen weight's matmul keeps no input),
and the buffers its backward allocates, in order (``mm`` makes the weight's gradient before the
input's). Views, transposes and same-dtype ``.to()`` are free and make no entry. Sizes are bytes;
``N = batch_size * seq_len`` tokens, ``b`` bytes per element of the model's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..units import FP32
from .tape import Tape


@dataclass
class Lora:
    """PEFT LoRA on a projection: rank ``r``, adapters in fp32 (PEFT's default autocast of
    bf16/fp16 adapters), so the projection's input is copied to fp32 when the model is not."""

    r: int


class Ops:
    """Record ops for ``N`` tokens of ``b``-byte elements on ``tape``."""

    def __init__(self, tape: Tape, batch_size: int, seq_len: int, b: int) -> None:
        self.tape, self.b = tape, b
        self.B, self.T, self.N = batch_size, seq_len, batch_size * seq_len

    # -- linear layers ------------------------------------------------------------------------

    def matmul(
        self, where: str, comp: str, x: int, n_in: int, n_out: int, pid: str, trainable: bool,
        bias: bool = False, b: int | None = None
    ) -> int:  # fmt: skip
        """``x @ W.T`` on ``(N, n_in)``: ``MmBackward0`` saves ``x`` only when ``W`` trains and
        makes the weight's gradient before the input's. With a bias, ``AddmmBackward0`` makes
        the input's, the weight's, then the bias's (and is done with ``x`` before the last)."""
        b = self.b if b is None else b
        t, N = self.tape, self.N
        dx: list[tuple] = [("new", "dx", N * n_in * b), ("grad", 0, "dx")] if t.grad(x) else []
        dw: list[tuple] = [("param", pid, n_in * n_out * b)] if trainable else []
        if bias and trainable:  # done with x after the weight's gradient (mm reads its sizes)
            program = dx + dw + [("release", 0), ("param", pid + ".bias", n_out * b)]
        else:
            program = dw + dx
        saves = (x,) if trainable else ()
        (out,) = t.op(where, comp, [x], [N * n_out * b], saves, program, trainable)
        return out

    def linear(
        self, where: str, comp: str, x: int, n_in: int, n_out: int, pid: str, trainable: bool,
        bias: bool = False, lora: Lora | None = None
    ) -> int:  # fmt: skip
        """An ``nn.Linear`` (or GPT-2's ``Conv1D``), with PEFT LoRA if ``lora``: ``base(x) +
        B(A(x.to(fp32))) * scaling``, then ``.to(dtype)``. The sum is fp32, so the base output's
        gradient is cast back (a copy) and ``.to(dtype)`` costs an fp32 gradient."""
        out = self.matmul(where, comp, x, n_in, n_out, pid, trainable and not lora, bias)
        if not lora:
            return out
        t, N, b = self.tape, self.N, self.b
        x32 = self.to(where, comp, x, n_in, FP32)
        a = self.matmul(where + ".lora_A", comp, x32, n_in, lora.r, pid + ".A", True, b=FP32)
        if x32 != x:
            t.drop(x32)
        up = self.matmul(where + ".lora_B", comp, a, lora.r, n_out, pid + ".B", True, b=FP32)
        t.drop(a)
        (scaled,) = t.op(where, comp, [up], [N * n_out * FP32], (), self._dx(N * n_out * FP32))
        t.drop(up)
        # fp32 sum; a bf16 base output gets its gradient cast back to bf16 (a copy)
        cast = self._dx(N * n_out * b) if b != FP32 else [("grad", 0, "g")]
        prog = cast + [("grad", 1, "g")]
        (total,) = t.op(where, comp, [out, scaled], [N * n_out * FP32], (), prog)
        t.drop(out, scaled)
        res = self.to(where, comp, total, n_out, b, src=FP32)
        if res != total:
            t.drop(total)
        return res

    def to(
        self, where: str, comp: str, x: int, width: int, dst: int, src: int | None = None
    ) -> int:  # fmt: skip
        """``x.to(dtype)`` of ``N x width`` elements: free when the dtype is unchanged, else a
        copy, and its backward copies the gradient back."""
        src = self.b if src is None else src
        if src == dst:
            return x
        n = self.N * width
        (out,) = self.tape.op(where, comp, [x], [n * dst], (), self._dx(n * src))
        return out

    def _dx(self, n: int, i: int = 0) -> list[tuple]:
        """A backward that allocates one ``n``-byte gradient for input ``i``."""
        return [("new", f"d{i}", n), ("grad", i, f"d{i}")]

    # -- elementwise ------------------------------------------------------------------------------

    def add(self, where: str, comp: str, x: int, y: int, nbytes: int) -> int:
        """``x + y``: saves nothing; both inputs get the incoming gradient itself."""
        (out,) = self.tape.op(
            where, comp, [x, y], [nbytes], (), [("grad", 0, "g"), ("grad", 1, "g")]
        )
        return out

    def scale(self, where: str, comp: str, x: int, nbytes: int) -> int:
        """``x * python_number``: saves nothing; the gradient is a new tensor."""
        (out,) = self.tape.op(where, comp, [x], [nbytes], (), self._dx(nbytes))
        return out

    def mul(self, where: str, comp: str, x: int, y: int, nbytes: int) -> int:
        """``x * y``, same shapes: each input's gradient is a new tensor; saves the other one."""
        t = self.tape
        saves = tuple(v for v, other in ((y, x), (x, y)) if t.grad(other))
        program = [ins for i, v in enumerate((x, y)) if t.grad(v) for ins in self._dx(nbytes, i)]
        (out,) = t.op(where, comp, [x, y], [nbytes], saves, program)
        return out

    # -- norms --------------------------------------------------------------------------------

    def rmsnorm(self, where: str, comp: str, x: int, C: int, pid: str, trainable: bool) -> int:
        """Llama's RMSNorm, op by op: ``x32 = x.to(fp32)``; ``x32 * rsqrt(x32.pow(2).mean(-1) +
        eps)`` in fp32; ``.to(dtype)``; ``* weight``. Saves the fp32 input (twice over: ``pow``
        and the product), the fp32 ``rsqrt`` per token, and the normalised input if the weight
        trains."""
        t, N, b = self.tape, self.N, self.b
        x32 = self.to(where, comp, x, C, FP32)
        sq_bwd = [("new", "a", N * C * FP32), ("new", "b", N * C * FP32)] + self._dx(N * C * FP32)
        (sq,) = t.op(where, comp, [x32], [N * C * FP32], (x32,), sq_bwd)
        (mean,) = t.op(where, comp, [sq], [N * FP32], (), self._dx(N * C * FP32))
        t.drop(sq)
        (var,) = t.op(where, comp, [mean], [N * FP32], (), [("grad", 0, "g")])
        t.drop(mean)
        rs_bwd = [("new", "a", N * FP32), ("new", "b", N * FP32)] + self._dx(N * FP32)
        (rs,) = t.op(where, comp, [var], [N * FP32], ("out",), rs_bwd)
        t.drop(var)
        h_bwd = self._dx(N * C * FP32, 0) + [("new", "t", N * C * FP32)] + self._dx(N * FP32, 1)
        (h,) = t.op(where, comp, [x32, rs], [N * C * FP32], (x32, rs), h_bwd + [("del", "t")])
        if x32 != x:
            t.drop(x32)
        t.drop(rs)
        h_b = self.to(where, comp, h, C, b, src=FP32)
        if h_b != h:
            t.drop(h)
        return self.weight_mul(where, comp, h_b, C, pid, trainable)

    def weight_mul(self, where: str, comp: str, h: int, C: int, pid: str, trainable: bool) -> int:
        """``weight * h`` (a norm's scale): the weight's gradient is ``(g * h).sum()``, made
        through a full-size temporary; ``h`` is saved only if the weight trains."""
        t, N, b = self.tape, self.N, self.b
        program = self._dx(N * C * b) if t.grad(h) else []
        if trainable:
            program += [("new", "t", N * C * b), ("param", pid, C * b), ("del", "t")]
        (out,) = t.op(where, comp, [h], [N * C * b], (h,) if trainable else (), program, trainable)
        t.drop(h)
        return out

    def layernorm(self, where: str, comp: str, x: int, C: int, pid: str, trainable: bool) -> int:
        """``nn.LayerNorm`` (``native_layer_norm``): saves the input and a mean and a reciprocal
        standard deviation per token (the input's dtype on the CPU); the backward makes the
        input's, the weight's and the bias's gradients."""
        t, N, b = self.tape, self.N, self.b
        program = self._dx(N * C * b) if t.grad(x) else []
        if trainable:
            program += [("param", pid, C * b), ("param", pid + ".bias", C * b)]
        stats = [t.tensor(N * b, False, comp, where) for _ in "mr"]  # mean, rstd
        (out,) = t.op(where, comp, [x], [N * C * b], (x, *stats), program, trainable)
        t.drop(*stats)
        return out

    # -- attention ----------------------------------------------------------------------------

    def rope(self, where: str, comp: str, x: int, width: int, cos: int, sin: int) -> int:
        """``x * cos + rotate_half(x) * sin`` on ``N x width`` elements; ``rotate_half`` is two
        slices (views whose backward each pays a full-size buffer), a negation and a ``cat``.
        Saves only ``cos`` and ``sin`` (one row of positions, shared by every layer)."""
        t, n = self.tape, self.N * width * self.b
        (xc,) = t.op(where, comp, [x, cos], [n], (cos,), self._dx(n))
        x1 = t.view(t.op(where, comp, [x], [0], (), self._dx(n))[0], x)  # x[..., : d/2]
        x2 = t.view(t.op(where, comp, [x], [0], (), self._dx(n))[0], x)  # x[..., d/2 :]
        (neg,) = t.op(where, comp, [x2], [n // 2], (), self._dx(n // 2))
        (cat,) = t.op(where, comp, [neg, x1], [n], (), [("grad", 0, "g"), ("grad", 1, "g")])
        t.drop(neg)
        (xs,) = t.op(where, comp, [cat, sin], [n], (sin,), self._dx(n))
        t.drop(cat)
        out = self.add(where, comp, xc, xs, n)
        t.drop(xc, xs)
        return out

    def sdpa(self, where: str, comp: str, q: int, k: int, v: int, H: int, K: int, d: int) -> int:
        """``scaled_dot_product_attention(is_causal=True)`` on the CPU's fused flash kernel, with
        ``H`` query and ``K`` key/value heads of ``d`` (grouped-query attention natively:
        ``enable_gqa``): saves q, k, v, the output and a log-sum-exp per head and token (fp32);
        no ``seq_len**2`` buffer at all."""
        t, N, b = self.tape, self.N, self.b
        program = self._dx(N * H * d * b, 0) + self._dx(N * K * d * b, 1)
        program += self._dx(N * K * d * b, 2)
        outs = [N * H * d * b, self.N * H * FP32]
        out, lse = t.op(where, comp, [q, k, v], outs, (q, k, v, "out", "out1"), program)
        t.drop(lse)
        return out

    def eager_attention(
        self, where: str, comp: str, q: int, k: int, v: int, H: int, d: int, mask: int,
        fp32_softmax: bool, copy_kv: bool
    ) -> int:  # fmt: skip
        """Eager attention on ``(B, H, T, d)`` tensors: ``softmax(q @ k.T * scale + mask) @ v``.

        ``matmul`` folds q and k to 3-D: q (laid out as ``(B, T, H, d)`` by RoPE or the fused
        projection) is copied, and so are ``k`` and, after the softmax, ``v``, unless
        ``repeat_kv`` already made them contiguous (``copy_kv``). Llama-like models take the softmax
        in fp32 and cast back (``fp32_softmax``): in bf16 both probability tensors are kept. Saves
        the q, k and v copies and the ``B x H x T x T`` probabilities: the quadratic term.
        Returns the ``(B*H, T, d)`` output."""
        t, N, b, S = self.tape, self.N, self.b, self.B * H * self.T * self.T
        n = N * H * d * b
        qc = self.copy(where, comp, q, n)
        kc = self.copy(where, comp, k, n) if copy_kv else k
        (scores,) = t.op(where, comp, [qc, kc], [S * b], (qc, kc), self._dx(n, 0) + self._dx(n, 1))
        t.drop(qc, *([kc] if kc != k else []))
        scaled = self.scale(where, comp, scores, S * b)
        t.drop(scores)
        (masked,) = t.op(where, comp, [scaled, mask], [S * b], (), [("grad", 0, "g")])
        t.drop(scaled)
        sm = FP32 if fp32_softmax else b
        m32 = masked if sm == b else self._to_n(where, comp, masked, S, sm)
        if m32 != masked:
            t.drop(masked)
        (p32,) = t.op(where, "attention_scores", [m32], [S * sm], ("out",), self._dx(S * sm))
        t.drop(m32)
        probs = p32 if sm == b else self._to_n(where, "attention_scores", p32, S, b, src=sm)
        if probs != p32:
            t.drop(p32)
        vc = self.copy(where, comp, v, n) if copy_kv else v
        prog = self._dx(S * b, 0) + self._dx(n, 1)
        (out,) = t.op(where, "attention_scores", [probs, vc], [n], (probs, vc), prog)
        t.drop(probs)
        if vc != v:
            t.drop(vc)
        return out

    def _to_n(self, where: str, comp: str, x: int, n: int, dst: int, src: int | None = None) -> int:
        """``x.to(dtype)`` of ``n`` elements (a copy; the gradient is copied back)."""
        src = self.b if src is None else src
        (out,) = self.tape.op(where, comp, [x], [n * dst], (), self._dx(n * src))
        return out

    def view_copy(self, where: str, comp: str, x: int, nbytes: int) -> int:
        """A view whose backward must copy (the gradient arrives in another memory layout)."""
        (out,) = self.tape.op(where, comp, [x], [0], (), self._dx(nbytes))
        return self.tape.view(out, x)

    def copy(self, where: str, comp: str, x: int, nbytes: int) -> int:
        """``.contiguous()`` / a ``reshape`` that copies: the gradient passes straight through."""
        (out,) = self.tape.op(where, comp, [x], [nbytes], (), [("grad", 0, "g")])
        return out

    def expand_sum(self, where: str, comp: str, x: int, nbytes: int) -> int:
        """``expand`` (a view) whose backward sums the gradient back to ``nbytes``."""
        return self.view_copy(where, comp, x, nbytes)

    def gelu_tanh(self, where: str, comp: str, x: int, width: int) -> int:
        """GPT-2's ``gelu_new`` written out: ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 *
        x**3)))``, eight ops that keep four ``N x width`` tensors (``x``, the tanh, ``1 + tanh``,
        ``0.5 * x``) where a fused GELU keeps one."""
        t, n = self.tape, self.N * width * self.b
        half = self.scale(where, comp, x, n)
        cube_bwd = [("new", "a", n), ("new", "b", n)] + self._dx(n)
        (cube,) = t.op(where, comp, [x], [n], (x,), cube_bwd)
        small = self.scale(where, comp, cube, n)
        t.drop(cube)
        inner = self.add(where, comp, x, small, n)
        t.drop(small)
        arg = self.scale(where, comp, inner, n)
        t.drop(inner)
        (th,) = t.op(where, comp, [arg], [n], ("out",), self._dx(n))
        t.drop(arg)
        (one,) = t.op(where, comp, [th], [n], (), [("grad", 0, "g")])
        t.drop(th)
        out = self.mul(where, comp, half, one, n)
        t.drop(half, one)
        return out
