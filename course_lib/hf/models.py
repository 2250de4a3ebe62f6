"""The four supported families as op recipes: one training step recorded on a tape.

:func:`record_step` writes the forward pass of ``model(input_ids, labels=input_ids,
use_cache=False)`` for a Llama-like model (``llama``, ``mistral``, ``qwen2``: RMSNorm, RoPE,
grouped-query attention, SwiGLU) or GPT-2 (learned positions, LayerNorm, fused ``c_attn``,
tanh-GELU written out op by op) as :mod:`~course_lib.hf.ops` ops, with PEFT LoRA on
every attention and MLP projection if asked, and each decoder layer checkpointed the way
``model.activation_checkpointing_enable()`` does it (non-reentrant; the embedding output is made
to require a gradient so that LoRA's gradients reach the first layer).
"""

from __future__ import annotations

from ..units import FP32, INT64
from .arch import Arch, StepSpec
from .ops import Lora, Ops
from .tape import LOSS, Tape


def record_step(arch: Arch, spec: StepSpec) -> Tape:
    """Record one training step of ``arch`` (module docstring); ``replay`` it for the peak."""
    tape = Tape()
    ops = Ops(tape, spec.batch_size, spec.seq_len, spec.b)
    full = spec.lora_rank is None
    lora = None if spec.lora_rank is None else Lora(spec.lora_rank)
    C, V, N, b = arch.hidden_size, arch.vocab_size, ops.N, spec.b
    gpt2, recompute = arch.family == "gpt2", spec.checkpointing == "blocks"
    # The base model's locals (embeddings, positions, RoPE's tables, the mask) live until it
    # returns the final hidden state; that and the logits live until the loss is computed.
    embeds = [("param", "embed", V * C * b)]
    x = x0 = tape.op("embed_tokens", "embeddings", [], [N * C * b], (), embeds, full)[0]
    if recompute and not full:
        # enable_input_require_grads(): the embedding output becomes a leaf that needs a
        # gradient, so its AccumulateGrad node holds it until the graph is gone.
        tape.needs_grad[x] = True
        tape.keep(x)
    extra: tuple[int, ...]
    if gpt2:
        x, extra, pe = _gpt2_positions(ops, arch, x, full)
        model_locals = [x0, pe, *extra]
    else:
        extra = _llama_positions(ops, arch, spec)
        model_locals = [x0, *extra]
    mask = _causal_mask(ops, spec) if spec.eager else -1
    model_locals += [mask] if mask >= 0 else []
    for i in range(arch.num_hidden_layers):
        if recompute:
            # GPT-2 passes the mask positionally (saved with the input), Llama as a keyword
            masks = (mask,) if mask >= 0 else ()
            args, captured = ((x, *masks), extra) if gpt2 else ((x,), (*extra, *masks))
            tape.begin_checkpoint(args, captured)
        layer = _gpt2_layer if gpt2 else _llama_layer
        out = layer(ops, arch, spec, f"layers.{i}", x, extra, mask, full, lora)
        if recompute:
            tape.end_checkpoint()
        if x != x0:
            tape.drop(x)
        x = out
    norm = ops.layernorm if gpt2 else ops.rmsnorm
    h = norm("norm", "norms", x, C, "norm", full)
    tape.drop(x, *model_locals)
    head = "embed" if arch.tie_word_embeddings else "lm_head"
    logits = ops.matmul("lm_head", LOSS, h, C, V, head, full)
    _loss(ops, logits, V)
    return tape


def _loss(ops: Ops, logits: int, V: int) -> None:
    """HF's ``ForCausalLMLoss``: ``logits.float()``, the labels shifted by padding (an int64
    copy), ``cross_entropy`` = ``log_softmax`` (saves its fp32 output, ``N x V``) + ``nll_loss``
    (saves the labels and a weight total)."""
    t, N, B, T = ops.tape, ops.N, ops.B, ops.T
    l32 = ops._to_n("loss", LOSS, logits, N * V, FP32) if ops.b != FP32 else logits
    padded = t.tensor(B * (T + 1) * INT64, False, LOSS, "loss: labels padded")
    labels = padded  # one row: labels[..., 1:] is already contiguous, so no copy
    if B > 1:
        labels = t.tensor(N * INT64, False, LOSS, "loss: labels shifted")
    (logp,) = t.op("loss", LOSS, [l32], [N * V * FP32], ("out",), ops._dx(N * V * FP32))
    total = t.tensor(FP32, False, LOSS, "loss")  # nll_loss's weight total
    t.keep(total)  # (measured: it outlives the step)
    prog = ops._dx(N * V * FP32)
    (loss,) = t.op("loss", LOSS, [logp], [FP32], (labels, total), prog)
    t.drop(logp, labels)
    t.keep(loss)
    t.loss = loss


def _llama_positions(ops: Ops, arch: Arch, spec: StepSpec) -> tuple[int, int, int]:
    """RoPE's ``cos`` and ``sin``: one ``(1, seq_len, head_dim)`` row each, shared by all layers,
    and the ``position_ids`` they come from (int64; a checkpointed layer keeps them too)."""
    t, row = ops.tape, spec.seq_len * arch.head_dim * spec.b
    cos, sin = (t.tensor(row, False, "attention", "rotary_emb") for _ in "cs")
    return cos, sin, t.tensor(spec.seq_len * INT64, False, "embeddings", "position_ids")


def _causal_mask(ops: Ops, spec: StepSpec) -> int:
    """Eager attention's additive mask, ``(batch, 1, seq_len, seq_len)`` in the model's dtype,
    made from a boolean one; it lives through the forward pass (and a checkpointed layer keeps it
    until its backward is over)."""
    t, T = ops.tape, spec.seq_len
    causal = t.tensor(T * T, False, "", "causal mask")  # kv_idx <= q_idx, bool
    mask = t.tensor(spec.batch_size * T * T * spec.b, False, "", "causal mask")  # where(...)
    t.drop(causal)
    return mask


def _llama_layer(ops: Ops, arch: Arch, spec: StepSpec, name, x, extra, mask, full, lora) -> int:
    """``LlamaDecoderLayer`` (also Mistral's and Qwen2's) as ops, in the order they run."""
    t, nc = ops.tape, ops.N * arch.hidden_size * spec.b
    h = ops.rmsnorm(f"{name}.input_layernorm", "norms", x, arch.hidden_size, f"{name}.ln1", full)
    a = _llama_attention(ops, arch, spec, f"{name}.self_attn", h, extra, mask, full, lora)
    t.drop(h)  # self_attn's argument goes when it returns
    x2 = ops.add(f"{name}.residual", "residual", x, a, nc)
    t.drop(a)
    h2 = ops.rmsnorm(f"{name}.post_attention_layernorm", "norms", x2, arch.hidden_size,
                     f"{name}.ln2", full)  # fmt: skip
    down = _llama_mlp(ops, arch, f"{name}.mlp", h2, full, lora)
    t.drop(h2)
    out = ops.add(f"{name}.residual", "residual", x2, down, nc)
    t.drop(x2, down)
    return out


def _llama_attention(ops: Ops, arch: Arch, spec: StepSpec, att, h, extra, mask, full, lora):
    """q, k, v projections, RoPE, attention (sdpa, or eager with ``repeat_kv``), ``o_proj``."""
    t, N, b, C, d = ops.tape, ops.N, spec.b, arch.hidden_size, arch.head_dim
    H, K = arch.num_attention_heads, arch.num_key_value_heads
    nq, nkv = N * H * d * b, N * K * d * b
    cos, sin, _ = extra
    q, k, v = (
        ops.linear(f"{att}.{p}", "attention", h, C, w, f"{att}.{p}", full, arch.qkv_bias, lora)
        for p, w in (("q_proj", H * d), ("k_proj", K * d), ("v_proj", K * d))
    )
    # (B, T, n*d) -> (B, n, T, d) are views, but q's and k's gradients come back from RoPE in
    # (B, n, T, d) order and are copied to be viewed as (B, T, n*d) again.
    qe = ops.rope(
        f"{att}.rope", "attention", ops.view_copy(att, "attention", q, nq), H * d, cos, sin
    )
    ke = ops.rope(
        f"{att}.rope", "attention", ops.view_copy(att, "attention", k, nkv), K * d, cos, sin
    )
    t.drop(q, k)
    if spec.eager:
        kr, vr = ke, ops.view_copy(att, "attention", v, nkv)
        if H != K:  # repeat_kv: expand (its backward sums the copies), then a copying reshape
            # (one kv head and one row: stride-0 views all the way, no copy)
            copies = K > 1 or spec.batch_size > 1
            kr, vr = (_repeat_kv(ops, att, z, nkv, nq if copies else 0) for z in (kr, vr))
        o = ops.eager_attention(
            f"{att}.attention", "attention", qe, kr, vr, H, d, mask, True, H == K
        )
        # (B*H, T, d) -> (B, H, T, d) -> transpose(1, 2).contiguous(): a copy, and the view's
        # backward copies the transposed gradient.
        oc = ops.copy(att, "attention", ops.view_copy(att, "attention", o, nq), nq)
        t.drop(o, *((kr, vr) if H != K else ()))
    else:
        oc = ops.sdpa(f"{att}.sdpa", "attention", qe, ke, v, H, K, d)
    a = ops.linear(
        f"{att}.o_proj", "attention", oc, H * d, C, f"{att}.o_proj", full, arch.o_bias, lora
    )
    t.drop(oc, qe, ke, v)  # the attention's locals go when it returns
    return a


def _repeat_kv(ops: Ops, att: str, kv: int, nkv: int, nq: int) -> int:
    """``kv[:, :, None].expand(...).reshape(B, H, T, d)``: a view whose backward sums over the
    copies, then (``nq`` bytes) a copy whose backward passes the gradient on."""
    kv = ops.expand_sum(att, "attention", kv, nkv)
    return ops.copy(att, "attention", kv, nq) if nq else kv


def _llama_mlp(ops: Ops, arch: Arch, mlp: str, h2: int, full: bool, lora) -> int:
    """``down_proj(act_fn(gate_proj(x)) * up_proj(x))``: SiLU keeps its input, the product both
    of its factors (four ``N x intermediate`` tensors in all)."""
    t, C, M, bias = ops.tape, arch.hidden_size, arch.intermediate_size, arch.mlp_bias
    nm = ops.N * M * ops.b
    gate = ops.linear(f"{mlp}.gate_proj", "mlp", h2, C, M, f"{mlp}.gate_proj", full, bias, lora)
    (act,) = t.op(f"{mlp}.act_fn", "mlp", [gate], [nm], (gate,), ops._dx(nm))
    t.drop(gate)
    up = ops.linear(f"{mlp}.up_proj", "mlp", h2, C, M, f"{mlp}.up_proj", full, bias, lora)
    prod = ops.mul(f"{mlp}.act_fn * up_proj", "mlp", act, up, nm)
    t.drop(act, up)
    down = ops.linear(f"{mlp}.down_proj", "mlp", prod, M, C, f"{mlp}.down_proj", full, bias, lora)
    t.drop(prod)
    return down


def _gpt2_positions(ops: Ops, arch: Arch, x: int, full: bool) -> tuple[int, tuple[int], int]:
    """``wte(ids) + wpe(position_ids)``: the position table's gradient is all of it
    (``max_position_embeddings x hidden``), and the sum's backward reduces the gradient over the
    batch for it. Returns the sum, ``(position_ids,)`` and the position embeddings."""
    t, T, C, b = ops.tape, ops.T, arch.hidden_size, ops.b
    pos = t.tensor(T * INT64, False, "embeddings", "position_ids")
    table = [("param", "wpe", arch.max_position_embeddings * C * b)]
    (pe,) = t.op("wpe", "embeddings", [], [T * C * b], (pos,), table, full)
    prog = [("grad", 0, "g"), ("new", "d1", T * C * b), ("grad", 1, "d1")]
    (h,) = t.op("embeddings", "embeddings", [x, pe], [ops.N * C * b], (), prog)
    return h, (pos,), pe


def _gpt2_layer(ops: Ops, arch: Arch, spec: StepSpec, name, x, extra, mask, full, lora) -> int:
    """``GPT2Block`` as ops: LayerNorm, fused ``c_attn``, attention, ``c_proj``, LayerNorm,
    ``c_fc``, tanh-GELU, ``c_proj`` (every ``Conv1D`` is an ``addmm`` with a bias)."""
    t, N, b = ops.tape, ops.N, spec.b
    C, M, H = arch.hidden_size, arch.intermediate_size, arch.num_attention_heads
    d, nc = arch.head_dim, ops.N * arch.hidden_size * spec.b
    att, mlp = f"{name}.attn", f"{name}.mlp"
    h = ops.layernorm(f"{name}.ln_1", "norms", x, C, f"{name}.ln_1", full)
    qkv = ops.linear(f"{att}.c_attn", "attention", h, C, 3 * C, f"{att}.c_attn", full, True, lora)
    # split(): three views; its backward concatenates the three gradients (3 N C).
    q, k, v = (
        t.view(z, qkv)
        for z in t.op(f"{att}.split", "attention", [qkv], [0, 0, 0], (), ops._dx(3 * nc))
    )
    if spec.eager:  # the gradients come back as (B, H, T, d): each view's backward copies
        k, v, q = (ops.view_copy(att, "attention", z, nc) for z in (k, v, q))
        o = ops.eager_attention(f"{att}.attention", "attention", q, k, v, H, d, mask, False, True)
        oc = ops.copy(att, "attention", ops.view_copy(att, "attention", o, nc), nc)
        t.drop(o)
    else:
        oc = ops.sdpa(f"{att}.sdpa", "attention", q, k, v, H, H, d)
    a = ops.linear(f"{att}.c_proj", "attention", oc, C, C, f"{att}.c_proj", full, True, lora)
    t.drop(oc, qkv, q, k, v)  # the attention's locals go when it returns
    x2 = ops.add(f"{name}.residual", "residual", a, x, nc)
    t.drop(h)  # (attn_output stays in a local until the block returns)
    h2 = ops.layernorm(f"{name}.ln_2", "norms", x2, C, f"{name}.ln_2", full)
    up = ops.linear(f"{mlp}.c_fc", "mlp", h2, C, M, f"{mlp}.c_fc", full, True, lora)
    if arch.activation == "gelu_new":
        act = ops.gelu_tanh(f"{mlp}.act", "mlp", up, M)
    else:  # one fused op: saves its input
        (act,) = t.op(f"{mlp}.act", "mlp", [up], [N * M * b], (up,), ops._dx(N * M * b))
    t.drop(up)
    down = ops.linear(f"{mlp}.c_proj", "mlp", act, M, C, f"{mlp}.c_proj", full, True, lora)
    t.drop(act)
    out = ops.add(f"{name}.residual", "residual", x2, down, nc)
    t.drop(x2, down, h2, a)
    return out
