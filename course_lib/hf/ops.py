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
from .attention import AttentionOps
from .norms import NormOps
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


class Adapters:
    """Which projections get a LoRA adapter (by PEFT module name), and the adapter itself.

    Args:
        lora: the adapter recipe.
        targets: PEFT module names (empty: every projection).
    """

    def __init__(self, lora: Lora, targets: tuple[str, ...]) -> None:
        self.lora, self.targets = lora, set(targets)

    def __call__(self, name: str) -> Lora | None:
        """The adapter of projection ``name``, or ``None`` when PEFT leaves it frozen.

        Args:
            name: a projection's PEFT name.

        Returns:
            The adapter, or ``None``.
        """
        return self.lora if not self.targets or name in self.targets else None


class Ops(AttentionOps, NormOps):
    """Record ops for ``N`` tokens of ``b``-byte elements on ``tape``.

    Args:
        tape: the tape to record on.
        batch_size: rows.
        seq_len: tokens per row.
        b: bytes per element of the hidden states.
        quant: ``"nf4"``, ``"int8"`` or ``""`` (16-bit projections).
    """

    def __init__(self, tape: Tape, batch_size: int, seq_len: int, b: int, quant: str = "") -> None:
        self.tape, self.b = tape, b
        self.B, self.T, self.N = batch_size, seq_len, batch_size * seq_len
        self.quant = quant  # frozen projections stored as "nf4" or "int8" (bitsandbytes)
        self.compute_b = b  # a quantised projection's compute dtype (fp16/bf16)
        self.head_b = b  # the logits' element size
        self.cuda = False  # CUDA kernels: LayerNorm statistics in fp32, softmax's backward
        self.half = False  # the model's dtype is float16 (CUDA fuses its fp32 softmax)
        self.nf4_keeps_input = False  # bitsandbytes before 0.43.2 (StepSpec.nf4_keeps_input)

    # -- linear layers ------------------------------------------------------------------------

    def matmul(
        self,
        where: str,
        comp: str,
        x: int,
        n_in: int,
        n_out: int,
        pid: str,
        trainable: bool,
        bias: bool = False,
        b: int | None = None,
    ) -> int:
        """``x @ W.T`` on ``(N, n_in)``: ``MmBackward0`` saves ``x`` only when ``W`` trains and
        makes the weight's gradient before the input's. With a bias, ``AddmmBackward0`` makes
        the input's, the weight's, then the bias's (and is done with ``x`` before the last).

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            n_in: input features.
            n_out: output features.
            pid: the weight's parameter name.
            trainable: the weight trains.
            bias: with a bias.
            b: element size (default: the hidden states').

        Returns:
            The output tensor's id.
        """
        b = self.b if b is None else b
        t, N = self.tape, self.N
        dx: list[tuple] = [("new", "dx", N * n_in * b), ("grad", 0, "dx")] if t.grad(x) else []
        dw: list[tuple] = [("param", pid, n_in * n_out * b)] if trainable else []
        if bias and trainable:  # done with x after the weight's gradient (mm reads its sizes)
            program = dx + dw + [("release", 0), ("param", pid + ".bias", n_out * b)]
        else:
            program = dw + dx
        saves = (x,) if trainable else ()
        mm = 2 * N * n_in * n_out
        t.count(mm, mm * (t.grad(x) + trainable), b)
        (out,) = t.op(where, comp, [x], [N * n_out * b], saves, program, trainable)
        return out

    def linear(
        self, where: str, comp: str, x: int, n_in: int, n_out: int, pid: str, trainable: bool,
        bias: bool = False, lora: Lora | None = None, stored: bool = True,
    ) -> int:  # fmt: skip
        """An ``nn.Linear`` (or GPT-2's ``Conv1D``), with PEFT LoRA if ``lora``: ``base(x) +
        B(A(dropout(x.to(adapter dtype)))) * scaling``. PEFT's ``Linear`` sums in the wider
        dtype and casts the sum back (fp32 adapters on a bf16 model: the base output's gradient
        is cast back, and ``.to(dtype)`` costs an fp32 gradient); its bitsandbytes layers clone
        the base output and cast the adapter's output to it before the sum. A frozen projection
        stored in 4 or 8 bits (``self.quant``) is :meth:`quant_linear`.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            n_in: input features.
            n_out: output features.
            pid: the weight's parameter name.
            trainable: the weight trains.
            bias: with a bias.
            lora: the adapter on it, or ``None``.
            stored: the weight is stored as the projections are (``False``: the head, which
                bitsandbytes never quantises).

        Returns:
            The output tensor's id.
        """
        if (not trainable or lora) and self.quant and stored:
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
        if self.quant and stored:  # output.to(result dtype), then result + output
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

    def project(
        self, where: str, comp: str, x: int, n_in: int, n_out: int, full: bool, bias: bool,
        ad: Adapters | None,
    ) -> int:  # fmt: skip
        """:meth:`linear` of the projection at ``where`` (also its parameter's name), with the
        adapter ``ad`` gives the PEFT module name ``where`` ends in (``None``: frozen, none).

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            n_in: input features.
            n_out: output features.
            full: the base weights train (a full fine-tune).
            bias: with a bias.
            ad: the LoRA adapters (``None``: none).

        Returns:
            The output tensor's id.
        """
        lora = ad(where.rsplit(".", 1)[-1]) if ad else None
        return self.linear(where, comp, x, n_in, n_out, where, full, bias, lora)

    def dropout(self, where: str, comp: str, x: int, n: int, elem: int, mask: int) -> int:
        """``nn.Dropout(p > 0)`` in training on ``n`` elements of ``elem`` bytes: on the CPU
        ``x * noise`` keeps the noise (``elem`` bytes each, ``mask == elem``); on CUDA
        ``native_dropout`` keeps a one-byte mask (``mask == 1``). The backward makes one
        gradient.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            n: elements.
            elem: bytes per element.
            mask: bytes per mask element.

        Returns:
            The output tensor's id.
        """
        t = self.tape
        noise = t.tensor(n * mask, False, comp, where + " (dropout mask)")
        (out,) = t.op(where, comp, [x], [n * elem], (noise,), self._dx(n * elem))
        t.drop(noise)
        return out

    def quant_linear(self, where: str, comp: str, x: int, n_in: int, n_out: int) -> int:
        """A frozen bitsandbytes projection as training runs it (bitsandbytes 0.50).

        ``Linear4bit`` casts its input to the compute dtype, dequantises the weight (an
        ``n_out x n_in`` transient, in the forward and again in the backward), keeps no input
        (``MatMul4Bit`` saves only the packed weight; before bitsandbytes 0.43.2 it kept its
        input on ``ctx``, as int8 does: ``nf4_keeps_input``) and casts the output back.
        ``Linear8bitLt`` does not cast its input. On CUDA (``MatMul8bitLt``) it quantises an
        fp16 copy of it to int8 with an fp32 scale per row (``int8_vectorwise_quant``; outlier
        columns are data: counted as none) and keeps the input itself; on the CPU training goes
        through ``MatMul8bitFp``, which dequantises the weight in the input's dtype and keeps
        the input. Both keep it on ``ctx`` (``ctx.A``, ``ctx.tensors``), not through
        ``save_for_backward``, so checkpointing cannot drop it (``Node.held``). Both backwards
        dequantise the weight again, in the input's dtype.

        Args:
            where: the projection's name (also its parameter's).
            comp: the component its tensors count under.
            x: the input tensor.
            n_in: input features.
            n_out: output features.

        Returns:
            The output tensor, in the hidden states' dtype.
        """
        t, N, b = self.tape, self.N, self.b
        cb = b if self.quant == "int8" else self.compute_b  # int8 computes in the input's dtype
        w = n_in * n_out * cb
        xc = self.to(where, comp, x, n_in, cb)
        # int8: ctx.A = A (ctx.tensors on CUDA); NF4 before bitsandbytes 0.43.2: ctx.tensors =
        # (A, B) whenever A needs a gradient (the backward never read it)
        keeps = self.quant == "int8" or (self.nf4_keeps_input and t.grad(xc))
        held: tuple = (xc,) if keeps else ()
        if self.quant == "int8" and self.cuda:
            half = t.tensor(N * n_in * 2, False, comp, where + " (fp16 input)") if cb != 2 else None
            extra = [t.tensor(N * n_in + N * FP32, False, comp, where + " (int8 input)")]
            if half is not None:
                t.drop(half)
        else:
            extra = [t.tensor(w, False, comp, where + " (dequantised weight)")]
        # int8 dequantises as CB.to(dtype).mul_(SCB.unsqueeze(1).mul(1 / 127)): an fp32 scale
        # per row beside the weight, gone before the matmul
        scale = [("new", "s", n_out * FP32), ("del", "s")] if self.quant == "int8" else []
        if scale and not self.cuda:
            t.drop(t.tensor(n_out * FP32, False, comp, where + " (dequantisation scale)"))
        prog = [("new", "w", w), *scale, ("new", "dx", N * n_in * cb), ("del", "w"),
                ("grad", 0, "dx")]  # fmt: skip
        t.count(2 * N * n_in * n_out, 2 * N * n_in * n_out * t.grad(xc), cb)
        (out,) = t.op(where, comp, [xc], [N * n_out * cb], (), prog, held=held)
        t.drop(*extra)
        if xc != x:
            t.drop(xc)
        res = self.to(where, comp, out, n_out, b, src=cb)
        if res != out:
            t.drop(out)
        return res

    def to(
        self, where: str, comp: str, x: int, width: int, dst: int, src: int | None = None
    ) -> int:
        """``x.to(dtype)`` of ``N x width`` elements: free when the dtype is unchanged, else a
        copy, and its backward copies the gradient back.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            width: elements per token.
            dst: target element size.
            src: source element size (default: the hidden states').

        Returns:
            The output tensor's id (``x`` itself when the dtype is unchanged).
        """
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
        """``x + y``: saves nothing; both inputs get the incoming gradient itself.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: one input's id.
            y: the other's.
            nbytes: the output's size.

        Returns:
            The output tensor's id.
        """
        (out,) = self.tape.op(
            where, comp, [x, y], [nbytes], (), [("grad", 0, "g"), ("grad", 1, "g")]
        )
        return out

    def scale(self, where: str, comp: str, x: int, nbytes: int) -> int:
        """``x * python_number``: saves nothing; the gradient is a new tensor.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            nbytes: the output's size.

        Returns:
            The output tensor's id.
        """
        (out,) = self.tape.op(where, comp, [x], [nbytes], (), self._dx(nbytes))
        return out

    def mul(self, where: str, comp: str, x: int, y: int, nbytes: int) -> int:
        """``x * y``, same shapes: each input's gradient is a new tensor; saves the other one.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: one input's id.
            y: the other's.
            nbytes: the output's size.

        Returns:
            The output tensor's id.
        """
        t = self.tape
        saves = tuple(v for v, other in ((y, x), (x, y)) if t.grad(other))
        program = [ins for i, v in enumerate((x, y)) if t.grad(v) for ins in self._dx(nbytes, i)]
        (out,) = t.op(where, comp, [x, y], [nbytes], saves, program)
        return out

    def _to_n(self, where: str, comp: str, x: int, n: int, dst: int, src: int | None = None) -> int:
        """``x.to(dtype)`` of ``n`` elements (a copy; the gradient is copied back)."""
        src = self.b if src is None else src
        (out,) = self.tape.op(where, comp, [x], [n * dst], (), self._dx(n * src))
        return out

    def view_copy(self, where: str, comp: str, x: int, nbytes: int) -> int:
        """A view whose backward must copy (the gradient arrives in another memory layout).

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            nbytes: the gradient's size.

        Returns:
            The view's id.
        """
        (out,) = self.tape.op(where, comp, [x], [0], (), self._dx(nbytes))
        return self.tape.view(out, x)

    def copy(self, where: str, comp: str, x: int, nbytes: int) -> int:
        """``.contiguous()`` / a ``reshape`` that copies: the gradient passes straight through.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            nbytes: the copy's size.

        Returns:
            The output tensor's id.
        """
        (out,) = self.tape.op(where, comp, [x], [nbytes], (), [("grad", 0, "g")])
        return out

    def expand_sum(self, where: str, comp: str, x: int, nbytes: int) -> int:
        """``expand`` (a view) whose backward sums the gradient back to ``nbytes``.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            nbytes: the gradient's size.

        Returns:
            The view's id.
        """
        return self.view_copy(where, comp, x, nbytes)

    def gelu_tanh(self, where: str, comp: str, x: int, width: int) -> int:
        """GPT-2's ``gelu_new`` written out: ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 *
        x**3)))``, eight ops that keep four ``N x width`` tensors (``x``, the tanh, ``1 + tanh``,
        ``0.5 * x``) where a fused GELU keeps one.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            width: elements per token.

        Returns:
            The output tensor's id.
        """
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
