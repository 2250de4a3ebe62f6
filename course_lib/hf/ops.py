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

from .attention import FP32, INT64, AttentionOps  # noqa: F401  (the element sizes, re-exported)
from .tape import Tape


@dataclass
class Lora:
    """PEFT LoRA on a projection: rank ``r``, adapters of ``b`` bytes per element (4: PEFT's
    default autocast of bf16/fp16 adapters to fp32, so the projection's input is copied to fp32
    when the model is not), and ``dropout`` (``lora_dropout > 0``: an ``nn.Dropout`` on that
    copy; ``mask`` bytes per element of what its backward keeps: the adapter's element size on
    the CPU, 1 on CUDA)."""

    r: int
    b: int = FP32
    dropout: bool = False
    mask: int = FP32  # CPU: a noise tensor in the input's dtype; CUDA: native_dropout's bool mask


class Ops(AttentionOps):
    """Record ops for ``N`` tokens of ``b``-byte elements on ``tape``."""

    def __init__(self, tape: Tape, batch_size: int, seq_len: int, b: int, quant: str = "") -> None:
        self.tape, self.b = tape, b
        self.B, self.T, self.N = batch_size, seq_len, batch_size * seq_len
        self.quant = quant  # frozen projections stored as "nf4" or "int8" (bitsandbytes)
        self.compute_b = b  # a quantised projection's compute dtype (fp16/bf16)
        self.head_b = b  # the logits' element size
        self.cuda = False  # CUDA kernels: LayerNorm statistics in fp32, softmax's backward
        self.half = False  # the model's dtype is float16 (CUDA fuses its fp32 softmax)

    # -- linear layers ------------------------------------------------------------------------

    def matmul(self, where, comp, x, n_in, n_out, pid, trainable, bias=False, b=None) -> int:
        """``x @ W.T`` on ``(N, n_in)``: ``MmBackward0`` saves ``x`` only when ``W`` trains and
        makes the weight's gradient before the input's. With a bias, ``AddmmBackward0`` makes
        the input's, the weight's, then the bias's (and is done with ``x`` before the last)."""
        b = self.b if b is None else b
        t, N = self.tape, self.N
        dx = [("new", "dx", N * n_in * b), ("grad", 0, "dx")] if t.grad(x) else []
        dw = [("param", pid, n_in * n_out * b)] if trainable else []
        if bias and trainable:  # done with x after the weight's gradient (mm reads its sizes)
            program = dx + dw + [("release", 0), ("param", pid + ".bias", n_out * b)]
        else:
            program = dw + dx
        saves = (x,) if trainable else ()
        (out,) = t.op(where, comp, [x], [N * n_out * b], saves, program, trainable)
        return out

    def linear(self, where, comp, x, n_in, n_out, pid, trainable, bias=False, lora=None) -> int:
        """An ``nn.Linear`` (or GPT-2's ``Conv1D``), with PEFT LoRA if ``lora``: ``base(x) +
        B(A(dropout(x.to(adapter dtype)))) * scaling``. PEFT's ``Linear`` sums in the wider
        dtype and casts the sum back (fp32 adapters on a bf16 model: the base output's gradient
        is cast back, and ``.to(dtype)`` costs an fp32 gradient); its bitsandbytes layers clone
        the base output and cast the adapter's output to it before the sum. A frozen projection
        stored in 4 or 8 bits (``self.quant``) is :meth:`quant_linear`."""
        if (not trainable or lora) and self.quant:
            out = self.quant_linear(where, comp, x, n_in, n_out)
            if lora:  # peft's bnb layers: result = result.clone()
                copy = self.copy(where, comp, out, self.N * n_out * self.b)
                self.tape.drop(out)
                out = copy
        else:
            out = self.matmul(where, comp, x, n_in, n_out, pid, trainable and not lora, bias)
        if not lora:
            return out
        t, N, b, ab = self.tape, self.N, self.b, lora.b
        # x = x.to(adapter dtype) rebinds PEFT's local: the copy lives until forward returns
        x32 = self.to(where, comp, x, n_in, ab)
        xa = x32
        if lora.dropout:
            xa = self.dropout(where, comp, x32, N * n_in, ab, lora.mask)
        a = self.matmul(where + ".lora_A", comp, xa, n_in, lora.r, pid + ".A", True, b=ab)
        if xa != x32:
            t.drop(xa)  # dropout's output is a temporary
        keep = [x32] if x32 != x else []
        up = self.matmul(where + ".lora_B", comp, a, lora.r, n_out, pid + ".B", True, b=ab)
        t.drop(a)
        (scaled,) = t.op(where, comp, [up], [N * n_out * ab], (), self._dx(N * n_out * ab))
        t.drop(up)
        if self.quant:  # output.to(result dtype), then result + output in the model's dtype
            cast = self.to(where, comp, scaled, n_out, b, src=ab)
            if cast != scaled:
                t.drop(scaled)
            res = self.add(where, comp, out, cast, N * n_out * b)
            t.drop(out, cast, *keep)
            return res
        wide = max(b, ab)  # the sum takes the wider dtype; the narrower gradient is cast back
        cast_base = self._dx(N * n_out * b) if b != wide else [("grad", 0, "g")]
        cast_lora = self._dx(N * n_out * ab, 1) if ab != wide else [("grad", 1, "g")]
        (total,) = t.op(where, comp, [out, scaled], [N * n_out * wide], (), cast_base + cast_lora)
        t.drop(out, scaled)
        res = self.to(where, comp, total, n_out, b, src=wide)
        if res != total:
            t.drop(total)
        t.drop(*keep)
        return res

    def dropout(self, where, comp, x, n, elem, mask) -> int:
        """``nn.Dropout(p > 0)`` in training on ``n`` elements of ``elem`` bytes: on the CPU
        ``x * noise`` keeps the noise (``elem`` bytes each, ``mask == elem``); on CUDA
        ``native_dropout`` keeps a one-byte mask (``mask == 1``). The backward makes one
        gradient."""
        t = self.tape
        noise = t.tensor(n * mask, False, comp, where + " (dropout mask)")
        (out,) = t.op(where, comp, [x], [n * elem], (noise,), self._dx(n * elem))
        t.drop(noise)
        return out

    def quant_linear(self, where, comp, x, n_in, n_out) -> int:
        """A frozen bitsandbytes projection as training runs it. ``Linear4bit`` casts its input
        to the compute dtype, dequantises the weight (an ``n_out x n_in`` transient, in the
        forward and again in the backward), keeps no input (``MatMul4Bit`` saves only the packed
        weight) and casts the output back. ``Linear8bitLt`` (``MatMul8bitLt``) makes an int8
        copy of its fp16 input with a scale per row and keeps the fp16 input; its backward
        dequantises the weight the same way (outlier columns are data: counted as none)."""
        t, N, b, cb = self.tape, self.N, self.b, self.compute_b
        w = n_in * n_out * cb
        xc = self.to(where, comp, x, n_in, cb)
        saves: tuple = ()
        extra = []
        if self.quant == "int8":
            extra = [t.tensor(N * n_in + N * FP32, False, comp, where + " (int8 input)")]
            saves = (xc,)
        else:
            extra = [t.tensor(w, False, comp, where + " (dequantised weight)")]
        prog = [("new", "w", w), ("new", "dx", N * n_in * cb), ("del", "w"), ("grad", 0, "dx")]
        (out,) = t.op(where, comp, [xc], [N * n_out * cb], saves, prog)
        t.drop(*extra)
        if xc != x:
            t.drop(xc)
        res = self.to(where, comp, out, n_out, b, src=cb)
        if res != out:
            t.drop(out)
        return res

    def to(self, where, comp, x, width, dst, src=None) -> int:
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

    def add(self, where, comp, x, y, nbytes) -> int:
        """``x + y``: saves nothing; both inputs get the incoming gradient itself."""
        (out,) = self.tape.op(
            where, comp, [x, y], [nbytes], (), [("grad", 0, "g"), ("grad", 1, "g")]
        )
        return out

    def scale(self, where, comp, x, nbytes) -> int:
        """``x * python_number``: saves nothing; the gradient is a new tensor."""
        (out,) = self.tape.op(where, comp, [x], [nbytes], (), self._dx(nbytes))
        return out

    def mul(self, where, comp, x, y, nbytes) -> int:
        """``x * y``, same shapes: each input's gradient is a new tensor; saves the other one."""
        t = self.tape
        saves = tuple(v for v, other in ((y, x), (x, y)) if t.grad(other))
        program = [ins for i, v in enumerate((x, y)) if t.grad(v) for ins in self._dx(nbytes, i)]
        (out,) = t.op(where, comp, [x, y], [nbytes], saves, program)
        return out

    # -- norms --------------------------------------------------------------------------------

    def rmsnorm(self, where, comp, x, C, pid, trainable, groups=1, kind="llama", wsize=0) -> int:
        """RMSNorm over ``C`` features (``groups`` norms per token: a per-head QK-norm), op by
        op: ``x32 = x.to(fp32)``; ``x32 * rsqrt(x32.pow(2).mean(-1) + eps)`` in fp32; then the
        weight, three ways: ``"llama"`` ``weight * h.to(dtype)``; ``"olmo2"`` ``(weight *
        h).to(dtype)``; ``"gemma"`` ``(h * (1 + weight.float())).type_as(x)``. Saves the fp32
        input (twice over: ``pow`` and the product), the fp32 ``rsqrt`` per row, and what the
        weight's product needs."""
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

    def _gemma_scale(self, where, comp, h, C, pid, trainable, wsize=0) -> int:
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

    def weight_mul(self, where, comp, h, C, pid, trainable, e=None, wsize=0) -> int:
        """``weight * h`` (a norm's scale) on ``e``-byte elements (default: the model's): the
        weight's gradient is ``(g * h).sum()``, made through a full-size temporary; ``h`` is
        saved only if the weight trains."""
        t, N, b = self.tape, self.N, self.b if e is None else e
        program = self._dx(N * C * b) if t.grad(h) else []
        if trainable:
            wb = self.b  # the parameter's own dtype
            program += [("new", "t", N * C * b), ("param", pid, (wsize or C) * wb), ("del", "t")]
        (out,) = t.op(where, comp, [h], [N * C * b], (h,) if trainable else (), program, trainable)
        t.drop(h)
        return out

    def layernorm(self, where, comp, x, C, pid, trainable) -> int:
        """``nn.LayerNorm`` (``native_layer_norm``): saves the input and a mean and a reciprocal
        standard deviation per token (the input's dtype on the CPU); the backward makes the
        input's, the weight's and the bias's gradients."""
        t, N, b = self.tape, self.N, self.b
        program = self._dx(N * C * b) if t.grad(x) else []
        if trainable:
            program += [("param", pid, C * b), ("param", pid + ".bias", C * b)]
        e = FP32 if self.cuda else b  # mean, rstd: the input's dtype on the CPU, fp32 on CUDA
        stats = [t.tensor(N * e, False, comp, where) for _ in "mr"]
        (out,) = t.op(where, comp, [x], [N * C * b], (x, *stats), program, trainable)
        t.drop(*stats)
        return out

    def _to_n(self, where, comp, x, n, dst, src=None) -> int:
        """``x.to(dtype)`` of ``n`` elements (a copy; the gradient is copied back)."""
        src = self.b if src is None else src
        (out,) = self.tape.op(where, comp, [x], [n * dst], (), self._dx(n * src))
        return out

    def view_copy(self, where, comp, x, nbytes) -> int:
        """A view whose backward must copy (the gradient arrives in another memory layout)."""
        (out,) = self.tape.op(where, comp, [x], [0], (), self._dx(nbytes))
        return self.tape.view(out, x)

    def copy(self, where, comp, x, nbytes) -> int:
        """``.contiguous()`` / a ``reshape`` that copies: the gradient passes straight through."""
        (out,) = self.tape.op(where, comp, [x], [nbytes], (), [("grad", 0, "g")])
        return out

    def expand_sum(self, where, comp, x, nbytes) -> int:
        """``expand`` (a view) whose backward sums the gradient back to ``nbytes``."""
        return self.view_copy(where, comp, x, nbytes)

    def gelu_tanh(self, where, comp, x, width) -> int:
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
