"""Attention as recorded ops: RoPE, sdpa, FlashAttention-2 and eager attention.

A mixin of :class:`~course_lib.hf.ops.Ops` (the same conventions: sizes in bytes, ``N =
batch_size * seq_len`` tokens, ``b`` bytes per element of the model's dtype).
"""

from __future__ import annotations

from collections.abc import Callable

from ..units import FP32, INT64
from .tape import Tape


class AttentionOps:
    """The attention ops of :class:`~course_lib.hf.ops.Ops`."""

    tape: Tape
    N: int
    B: int
    T: int
    b: int
    compute_b: int
    cuda: bool
    half: bool
    # the Ops methods these recipes call (defined on Ops, the class that mixes this in)
    _dx: Callable[..., list[tuple]]
    add: Callable[..., int]
    scale: Callable[..., int]
    copy: Callable[..., int]
    to: Callable[..., int]
    _to_n: Callable[..., int]

    def rope(
        self,
        where: str,
        comp: str,
        x: int,
        width: int,
        cos: int,
        sin: int,
        wide: int = 0,
        phi3: bool = False,
    ) -> int:
        """``x * cos + rotate_half(x) * sin`` on ``N x width`` elements; ``rotate_half`` is two
        slices (views whose backward each pays a full-size buffer), a negation and a ``cat``.
        Saves only ``cos`` and ``sin`` (one row of positions, shared by every layer). ``wide``:
        OLMo 2's tables stay fp32, so the products are fp32 (their backward casts the gradient
        back) and the sum is cast to the model's dtype. ``phi3``: Phi-3 slices ``x[...,
        :rotary_dim]`` first and concatenates the (empty) rest after (a copy).

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            x: the input tensor's id.
            width: the projection's width (heads x head_dim).
            cos: the RoPE cosine table.
            sin: the RoPE sine table.
            wide: the tables are wider than the rotated part.
            phi3: Phi-3's ``torch.cat`` layout (a contiguous ``(B, H, T, d)``).

        Returns:
            The output tensor's id.
        """
        t, n = self.tape, self.N * width * self.b
        nw = self.N * width * (wide or self.b)
        src = x
        if phi3:
            x = t.view(t.op(where, comp, [x], [0], (), self._dx(n))[0], x)  # x[..., :rotary_dim]
        mix = self._dx(nw) + ([("new", "c", n), ("grad", 0, "c")] if wide else [])
        mix = [("new", "d0", nw), ("new", "c", n), ("del", "d0"), ("grad", 0, "c")] if wide \
            else self._dx(n)  # fmt: skip
        (xc,) = t.op(where, comp, [x, cos], [nw], (cos,), mix)
        x1 = t.view(t.op(where, comp, [x], [0], (), self._dx(n))[0], x)  # x[..., : d/2]
        x2 = t.view(t.op(where, comp, [x], [0], (), self._dx(n))[0], x)  # x[..., d/2 :]
        (neg,) = t.op(where, comp, [x2], [n // 2], (), self._dx(n // 2))
        (cat,) = t.op(where, comp, [neg, x1], [n], (), [("grad", 0, "g"), ("grad", 1, "g")])
        t.drop(neg)
        (xs,) = t.op(where, comp, [cat, sin], [nw], (sin,), mix)
        t.drop(cat)
        out = self.add(where, comp, xc, xs, nw)
        t.drop(xc, xs)
        if wide:
            res = self.to(where, comp, out, width, self.b, src=wide)
            t.drop(out)
            out = res
        if phi3:  # torch.cat([rotated, x[..., rotary_dim:]], -1): a copy; its backward slices
            (cat2,) = t.op(where, comp, [out], [n], (), [("grad", 0, "g")])
            t.drop(out)
            out = cat2
        del src
        return out

    def _attention_flops(self, H: int, d: int, parts: int, b: int = 0) -> None:
        """A fused attention kernel's operations: ``q @ k.T`` and ``p @ v``, ``2 x B x H x T**2
        x d`` each, over ``1 / parts`` of the score blocks it computes (a causal kernel skips
        the masked half); its backward computes the scores again and four products: 2.5 times
        the forward (FlashAttention-2's paper, section 3.2). Whole numbers, so a step read off
        its line (:mod:`~course_lib.hf.scaling`) counts them exactly."""
        forward = 4 * self.B * H * self.T**2 * d // parts
        self.tape.count(forward, 5 * forward // 2, b or self.b)

    def sdpa(self, where: str, comp: str, q: int, k: int, v: int, H: int, K: int, d: int) -> int:
        """``scaled_dot_product_attention(is_causal=True)`` on the CPU's fused flash kernel, with
        ``H`` query and ``K`` key/value heads of ``d`` (grouped-query attention natively:
        ``enable_gqa``): saves q, k, v, the output and a log-sum-exp per head and token (fp32);
        no ``seq_len**2`` buffer at all.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            q: the queries' id.
            k: the keys' id.
            v: the values' id.
            H: query heads.
            K: key/value heads.
            d: head dimension.

        Returns:
            The output tensor's id.
        """
        t, N, b = self.tape, self.N, self.b
        program = self._dx(N * H * d * b, 0) + self._dx(N * K * d * b, 1)
        program += self._dx(N * K * d * b, 2)
        outs = [N * H * d * b, self.N * H * FP32]
        self._attention_flops(H, d, 2)  # is_causal: the fused kernels skip the masked half
        out, lse = t.op(where, comp, [q, k, v], outs, (q, k, v, "out", "out1"), program)
        t.drop(lse)
        return out

    def sdpa_masked(
        self, where: str, comp: str, q: int, k: int, v: int, H: int, d: int, mask: int
    ) -> int:
        """``scaled_dot_product_attention(attn_mask=bool_mask)`` (packed documents: the model's
        block-diagonal causal mask, so no ``is_causal``): ATen converts the boolean mask to a
        float copy in q's dtype (``convert_boolean_attn_mask``), which the CPU flash kernel
        saves with q, k, v (here already repeated to ``H`` heads), the output and the
        log-sum-exp: ``batch x seq_len**2`` per layer.

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            q: the queries' id.
            k: the keys' id.
            v: the values' id.
            H: query heads.
            d: head dimension.
            mask: the boolean mask's id.

        Returns:
            The output tensor's id.
        """
        t, N, b, S = self.tape, self.N, self.b, self.B * self.T * self.T
        fmask = t.tensor(S * b, False, comp, where + " (float mask)")
        n = N * H * d * b
        program = self._dx(n, 0) + self._dx(n, 1) + self._dx(n, 2)
        outs = [n, N * H * FP32]
        self._attention_flops(H, d, 1)  # a dense mask: every block computed
        out, lse = t.op(where, comp, [q, k, v, mask], outs, (q, k, v, fmask, "out", "out1"),
                        program)  # fmt: skip
        t.drop(lse, fmask)
        return out

    def flash(
        self,
        where: str,
        comp: str,
        q: int,
        k: int,
        v: int,
        H: int,
        K: int,
        d: int,
        documents: int = 0,
    ) -> int:
        """FlashAttention-2 (``flash_attn_func``, CUDA): saves q, k, v, the output and an fp32
        log-sum-exp per head and token (plus a 16-byte RNG state); no ``seq_len**2`` tensor. Its
        backward (``mha_bwd``) makes dq, dk, dv, an fp32 ``dq_accum`` (tokens rounded up to 128,
        head_dim to 32) and ``softmax_d`` (fp32, heads x rounded tokens); with grouped-query
        attention dk and dv are first made for every query head, then summed.

        ``documents`` per row (packed, position ids reset): transformers calls
        ``flash_attn_varlen_func`` with ``cu_seq_lens``, and ``mha_varlen_bwd`` sizes
        ``dq_accum`` as ``(tokens + 128 x sequences) x heads x head_dim rounded`` and
        ``softmax_d`` as ``sequences x heads x longest rounded`` (the longest document is taken
        as the whole row: an upper bound) (flash-attn ``csrc/flash_attn/flash_api.cpp``).

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            q: the queries' id.
            k: the keys' id.
            v: the values' id.
            H: query heads.
            K: key/value heads.
            d: head dimension.
            documents: packed documents per row (0: none; varlen otherwise).

        Returns:
            The output tensor's id.
        """
        t, N, b, B = self.tape, self.N, self.b, self.B
        T128 = -(-self.T // 128) * 128
        d32 = -(-d // 32) * 32
        rng = t.tensor(2 * INT64, False, comp, where)
        seqs = B * documents
        acc = (N + 128 * seqs) * H * d32 * FP32 if documents else B * T128 * H * d32 * FP32
        sd = (seqs if documents else B) * H * T128 * FP32
        prog: list[tuple] = [("new", "q", N * H * d * b), ("new", "k", N * K * d * b),
                ("new", "v", N * K * d * b), ("new", "acc", acc), ("new", "sd", sd)]  # fmt: skip
        if H != K:
            prog += [("new", "ke", N * H * d * b), ("new", "ve", N * H * d * b)]
            prog += [("del", "ke"), ("del", "ve")]
        prog += [
            ("del", "acc"),
            ("del", "sd"),
            ("grad", 0, "q"),
            ("grad", 1, "k"),
            ("grad", 2, "v"),
        ]
        outs = [N * H * d * b, N * H * FP32]
        # causal, within each document; FlashAttention-2 takes no fp32: transformers casts fp32
        # queries, keys and values (kbit preparation's hidden states) to the compute dtype
        self._attention_flops(H, d, 2 * max(1, documents), min(self.b, self.compute_b))
        out, lse = t.op(where, comp, [q, k, v], outs, (q, k, v, "out", "out1", rng), prog)
        t.drop(lse, rng)
        return out

    def eager_attention(
        self, where: str, comp: str, q: int, k: int, v: int, H: int, d: int, mask: int,
        fp32_softmax: bool, copy_kv: bool, softcap: float = 0.0, copy_q: bool = True,
    ) -> tuple[int, int]:  # fmt: skip
        """Eager attention on ``(B, H, T, d)`` tensors: ``softmax(q @ k.T * scale + mask) @ v``.

        ``matmul`` folds q and k to 3-D: q (laid out as ``(B, T, H, d)`` by RoPE or the fused
        projection) is copied (``copy_q``: with more than one row), and so are ``k`` and,
        after the softmax, ``v`` (``copy_kv``: unless ``repeat_kv`` already made them
        contiguous). Llama-like models take the softmax
        in fp32 and cast back (``fp32_softmax``): in bf16 both probability tensors are kept. Saves
        the q, k and v copies and the ``B x H x T x T`` probabilities: the quadratic term.
        Returns the ``(B*H, T, d)`` output and the probabilities (the attention module returns
        them as its weights, and every decoder layer holds them, ``hidden_states, _ =
        self.self_attn(...)``, until it returns: the caller drops them).

        Args:
            where: the op's place in the model (``layers.3.mlp.down_proj``).
            comp: the breakdown component its tensors count under.
            q: the queries' id.
            k: the keys' id.
            v: the values' id.
            H: query heads.
            d: head dimension.
            mask: the additive mask's id (-1: none).
            fp32_softmax: the softmax runs in fp32 and is cast back.
            copy_kv: ``repeat_kv`` copies the keys and values (grouped-query attention).
            softcap: Gemma 2's score soft-capping (0: none).
            copy_q: the queries are copied contiguous first.

        Returns:
            ``(output id, attention weights id)``.
        """
        t, N, b, S = self.tape, self.N, self.b, self.B * H * self.T * self.T
        n = N * H * d * b
        qc = self.copy(where, comp, q, n) if copy_q else q
        kc = self.copy(where, comp, k, n) if copy_kv else k
        (scores,) = self._bmm(where, comp, qc, kc, S * b, n, n, 2 * S * d)
        t.drop(*([qc] if qc != q else []), *([kc] if kc != k else []))
        scaled = self.scale(where, comp, scores, S * b)
        t.drop(scores)
        if softcap:  # Gemma 2: scores / cap, tanh (keeps its output), * cap
            div = self.scale(where, comp, scaled, S * b)
            t.drop(scaled)
            (th,) = t.op(where, "attention_scores", [div], [S * b], ("out",), self._dx(S * b))
            t.drop(div)
            scaled = self.scale(where, comp, th, S * b)
            t.drop(th)
        (masked,) = t.op(where, comp, [scaled, mask], [S * b], (), [("grad", 0, "g")])
        t.drop(scaled)
        sm = FP32 if fp32_softmax else b
        # softmax(x, dtype=float32): on CUDA a float16 input takes one fused kernel
        # (``_softmax(half_to_float=True)``, aten/src/ATen/native/SoftMax.cpp); everywhere else
        # (the CPU, bfloat16) the scores are first copied to fp32 (``toType``).
        fused = self.cuda and self.half and sm != b
        m32 = masked if sm == b or fused else self._to_n(where, comp, masked, S, sm)
        in_b = b if fused else sm  # the softmax input's element size: its gradient's
        if self.cuda:
            # softmax_backward_cuda_out (aten/src/ATen/native/cuda/SoftMax.cu) allocates the
            # input's gradient, then ``tmp = grad * output`` (the output's dtype) beside it.
            sm_bwd = [("new", "d0", S * in_b), ("new", "tmp", S * sm), ("del", "tmp"),
                      ("grad", 0, "d0")]  # fmt: skip
        else:
            sm_bwd = self._dx(S * in_b)
        (p32,) = t.op(where, "attention_scores", [m32], [S * sm], ("out",), sm_bwd)
        if m32 != masked:
            t.drop(m32)  # the fp32 copy is softmax's own local
        probs = p32 if sm == b else self._to_n(where, "attention_scores", p32, S, b, src=sm)
        # ``attn_weights = softmax(attn_weights, ...).to(dtype)``: the masked scores stay
        # referenced until the cast's result replaces them.
        t.drop(masked)
        if probs != p32:
            t.drop(p32)
        vc = self.copy(where, comp, v, n) if copy_kv else v
        (out,) = self._bmm(where, "attention_scores", probs, vc, n, S * b, n, 2 * S * d)
        if vc != v:
            t.drop(vc)
        return out, probs

    def _bmm(
        self, where: str, comp: str, x: int, y: int, out_bytes: int, nx: int, ny: int,
        flops: int = 0,
    ) -> list[int]:  # fmt: skip
        """A batched matmul ``x @ y`` of ``flops`` operations: each input's gradient is made
        only if it needs one (as many operations again), and each is saved only for the other's
        gradient (as autograd's ``BmmBackward0`` does)."""
        t = self.tape
        t.count(flops, flops * (t.grad(x) + t.grad(y)), self.b)
        saves = tuple(v for v, other in ((x, y), (y, x)) if t.grad(other))
        prog = (self._dx(nx, 0) if t.grad(x) else []) + (self._dx(ny, 1) if t.grad(y) else [])
        return t.op(where, comp, [x, y], [out_bytes], saves, prog)
