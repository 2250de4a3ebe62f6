"""The language-model head and the loss, recorded on the tape: standard or chunked.

``"standard"`` is what ``model(input_ids, labels=...)`` runs in ``transformers``: the head makes
``batch x seq_len x vocab`` logits in the model's dtype (Gemma 2 soft-caps them: ``tanh(z / c) *
c``, three more of the same size), then ``ForCausalLMLoss`` takes ``logits.float()`` and
``cross_entropy`` keeps fp32 log-probabilities. With the plain loop (``outputs =
model(...)``; ``outputs.loss.backward()``) the logits stay referenced until the step ends.

``"chunked"`` is a fused linear cross-entropy (Liger-Kernel's
``LigerFusedLinearCrossEntropyFunction``, read from liger-kernel 0.8.5): no full logits. Its
forward walks the tokens in chunks of ``next_power_of_2(ceil(N / ceil(V / C)))`` rows, makes each
chunk's logits (``chunk x V``) and their gradient in place, writes the hidden states' gradient
(``N x C``, kept until backward) and, when the head trains, the head's gradient (``V x C``). Its
backward hands those over. The replay allocates the handed-over gradient as a new buffer, so at
that one moment it counts ``N x C`` (and ``V x C``) twice: an over-estimate of at most that.
"""

from __future__ import annotations

from ..units import FP32, INT64
from .families import HEAD
from .ops import Adapters, Ops
from .spec import Arch, StepSpec
from .tape import LOSS


def record_loss(
    ops: Ops, arch: Arch, spec: StepSpec, h: int, head: str, full: bool,
    ad: Adapters | None = None,
) -> None:  # fmt: skip
    """Record the head and the loss on ``ops.tape`` from the final hidden state ``h``.

    Args:
        ops: the :class:`~course_lib.hf.ops.Ops` recording on the tape.
        arch: the model's :class:`~course_lib.hf.spec.Arch`.
        spec: the step's :class:`~course_lib.hf.spec.StepSpec`.
        h: the final hidden state's id.
        head: the head's parameter name.
        full: the head's weight trains (a full fine-tune, or PEFT's ``modules_to_save``).
        ad: the LoRA adapters (``lm_head`` among their targets: LoRA on the output layer).

    Raises:
        ValueError: LoRA on the head with the chunked loss (not modelled).
    """
    C, V = arch.hidden_size, arch.vocab_size
    lora = ad(HEAD) if ad and HEAD in ad.targets else None  # only when named
    if spec.loss == "chunked":
        if lora:
            raise ValueError("LoRA on lm_head with the chunked loss is not modelled (the fused "
                             "loss takes the head's weight, not PEFT's adapter): use "
                             "loss='standard'")  # fmt: skip
        _chunked(ops, h, C, V, head, full)
        return
    t, N = ops.tape, ops.N
    if lora:  # PEFT's Linear around the head: the sum in the adapter's wider dtype, cast back
        logits = ops.linear("lm_head", LOSS, h, C, V, head, full, lora=lora, stored=False)
    else:
        logits = ops.matmul("lm_head", LOSS, h, C, V, head, full, b=ops.head_b)
    if arch.final_softcap:  # logits / cap; tanh (keeps its output); * cap
        nv = N * V * ops.head_b
        div = ops.scale("lm_head", LOSS, logits, nv)
        t.drop(logits)
        (th,) = t.op("lm_head", LOSS, [div], [nv], ("out",), ops._dx(nv))
        t.drop(div)
        logits = ops.scale("lm_head", LOSS, th, nv)
        t.drop(th)
    if spec.loop == "plain":  # outputs.logits: referenced until the step is over
        t.keep(logits)
    _cross_entropy(ops, logits, V)


def _cross_entropy(ops: Ops, logits: int, V: int) -> None:
    """HF's ``ForCausalLMLoss``: ``logits.float()``, the labels shifted by padding (an int64
    copy), ``cross_entropy`` = ``log_softmax`` (saves its fp32 output, ``N x V``) + ``nll_loss``
    (saves the labels and a weight total)."""
    t, N, B, T = ops.tape, ops.N, ops.B, ops.T
    l32 = logits
    if ops.head_b != FP32:
        l32 = ops._to_n("loss", LOSS, logits, N * V, FP32, src=ops.head_b)
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


def chunk_rows(N: int, C: int, V: int) -> int:
    """Liger's chunk: ``next_power_of_2(ceil(N / ceil(V / C)))`` rows, at most ``N``.

    Args:
        N: tokens.
        C: hidden size.
        V: vocabulary.

    Returns:
        Rows per chunk.
    """
    inc = -(-V // C)
    rows = -(-N // inc)
    return min(1 << max(rows - 1, 0).bit_length(), N)


def _chunked(ops: Ops, h: int, C: int, V: int, head: str, full: bool) -> None:
    t, N, B, T, b = ops.tape, ops.N, ops.B, ops.T, ops.head_b
    padded = t.tensor(B * (T + 1) * INT64, False, LOSS, "loss: labels padded")
    labels = t.tensor(N * INT64, False, LOSS, "loss: labels shifted") if B > 1 else padded
    grad_in = t.tensor(N * C * b, False, LOSS, "fused loss: hidden states' gradient")
    kept = [grad_in]
    prog = [("new", "dx", N * C * b), ("grad", 0, "dx")]
    if full:
        kept.append(t.tensor(V * C * b, False, LOSS, "fused loss: head's gradient"))
        prog.append(("param", head, V * C * b))
    loss_1d = t.tensor(N * FP32, False, LOSS, "fused loss: per-token loss")
    mask = t.tensor(N, False, LOSS, "fused loss: target mask")
    rows = chunk_rows(N, C, V)
    # the head's logits and, in the same forward, the hidden states' (and head's) gradients
    t.count(2 * N * C * V * (2 + full), 0, b)
    chunk = t.tensor(rows * V * b, False, LOSS, "fused loss: a chunk's logits")
    tmp = t.tensor(rows * C * b, False, LOSS, "fused loss: a chunk's input gradient")
    t.drop(chunk, tmp, mask)
    (loss,) = t.op("loss", LOSS, [h], [FP32], tuple(kept), prog, full)
    t.drop(loss_1d, *kept, labels)
    t.keep(loss)
    t.loss = loss
