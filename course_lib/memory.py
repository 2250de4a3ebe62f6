"""Memory: an analytical model of TinyGPT's training memory, and the meter it is checked against.

Two halves that the lessons put side by side:

* **Predict.** :func:`attention_elements` and :func:`activation_bytes` compute, from the shape
  alone, what one forward + backward pass of :class:`~course_lib.model.TinyGPT` keeps alive. The
  terms are derived from what autograd saves for each operation, not fitted.
* **Measure.** :func:`measure` runs a function (usually forward + backward) and reports the peak
  of live tensor bytes it allocated. On a CUDA device it reads the caching allocator's peak
  ("GPU: allocator peak"); everywhere it can count exactly, by intercepting every tensor
  allocation with a ``TorchDispatchMode`` and freeing it when its storage dies
  ("CPU: counted bytes"). Process RSS is never read: on the CPU it is noise.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from .model import TinyGPTConfig

__all__ = [
    "ActivationBreakdown",
    "MemoryReport",
    "LiveBytesTracker",
    "attention_elements",
    "activation_bytes",
    "parameter_count",
    "measure",
    "format_bytes",
    "training_step",
    "measure_step",
    "compare_shapes",
    "ShapeComparison",
]


def _check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a positive int, got {value!r} ({type(value).__name__})")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}")
    return value


def format_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``: binary units, three significant figures."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------


def _storage_key(t: torch.Tensor) -> int:
    # The address of the C++ StorageImpl: stable for the storage's life, and defined for fake
    # tensors too (which have no data pointer).
    return t.untyped_storage()._cdata


class LiveBytesTracker(TorchDispatchMode):
    """Counts the bytes of every tensor storage allocated while active, and frees them on death.

    A storage is counted once, when the op that allocated it returns; outputs that alias an input
    (views, in-place ops) allocate nothing and are skipped. A ``weakref.finalize`` on the storage
    subtracts its bytes when the last tensor using it dies, so ``live_bytes`` follows the true
    working set and ``peak_bytes`` is its maximum. Tensors that existed before the tracker started
    (parameters, the input batch) are not counted.
    """

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch wraps a mode's __torch_dispatch__ in a lazy `torch._dynamo.disable`, whose first
        # call imports dynamo (3-6 s per process here). The meter never runs under
        # torch.compile, so the wrapper buys nothing; without it the first measurement is instant.
        return False

    def __init__(self) -> None:
        super().__init__()
        self.live_bytes = 0
        self.peak_bytes = 0
        self._live: dict[int, int] = {}
        self.timeline: list[tuple[str, int]] | None = None

    def record_timeline(self) -> LiveBytesTracker:
        self.timeline = []
        return self

    def _release(self, key: int, nbytes: int) -> None:
        if self._live.get(key) == nbytes:
            del self._live[key]
            self.live_bytes -= nbytes

    def is_tracked(self, t: torch.Tensor) -> bool:
        return _storage_key(t) in self._live

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            _storage_key(a) for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in inputs or key in self._live:
                continue
            nbytes = storage.nbytes()
            self._live[key] = nbytes
            self.live_bytes += nbytes
            if self.live_bytes > self.peak_bytes:
                self.peak_bytes = self.live_bytes
            weakref.finalize(storage, self._release, key, nbytes)
            if self.timeline is not None:
                self.timeline.append((str(func), self.live_bytes))
        return out


@dataclass
class MemoryReport:
    """What :func:`measure` saw. All sizes in bytes.

    ``peak_bytes``: the peak of memory allocated by ``fn`` above what was live when it started.
    ``method``: ``"GPU: allocator peak"`` or ``"CPU: counted bytes"``.
    ``counted_peak_bytes``: the exact count (on a GPU too, for comparison with the allocator).
    ``saved_bytes``: bytes autograd saved for backward (unique storages allocated inside ``fn``).
    ``retained_bytes``: bytes still live when ``fn`` returned (e.g. the parameters' gradients).
    """

    peak_bytes: int
    method: str
    device: str
    counted_peak_bytes: int
    saved_bytes: int
    retained_bytes: int
    seconds: float
    result: object = field(default=None, repr=False)

    @property
    def label(self) -> str:
        return f"{self.method}: {format_bytes(self.peak_bytes)}"


def _pick_device(device) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def measure(fn: Callable[[], object], device=None, count_saved: bool = True) -> MemoryReport:
    """Run ``fn()`` once and report its peak memory.

    ``device`` defaults to CUDA when available, else the CPU. On CUDA the reported peak is the
    caching allocator's ``max_memory_allocated`` above the starting point; on the CPU it is the
    exact count of live tensor bytes (there is no CPU allocator API to ask). The measurement does
    not change what it measures: ``fn`` runs once, with the same ops.
    """
    if not callable(fn):
        raise TypeError(f"measure needs a callable with no arguments, got {type(fn).__name__}")
    dev = _pick_device(device)
    saved: dict[int, int] = {}
    tracker = LiveBytesTracker()

    def pack(t: torch.Tensor):
        if tracker.is_tracked(t):
            storage = t.untyped_storage()
            saved.setdefault(storage._cdata, storage.nbytes())
        return t

    hooks = (
        torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
        if count_saved
        else contextlib.nullcontext()
    )
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        start = torch.cuda.memory_allocated(dev)
    t0 = time.perf_counter()
    with tracker, hooks:
        result = fn()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        peak = torch.cuda.max_memory_allocated(dev) - start
        method = "GPU: allocator peak"
    else:
        peak = tracker.peak_bytes
        method = "CPU: counted bytes"
    seconds = time.perf_counter() - t0
    return MemoryReport(
        peak_bytes=int(peak),
        method=method,
        device=str(dev),
        counted_peak_bytes=tracker.peak_bytes,
        saved_bytes=sum(saved.values()),
        retained_bytes=tracker.live_bytes,
        seconds=seconds,
        result=result,
    )


# --------------------------------------------------------------------------------------------
# Analytical model
# --------------------------------------------------------------------------------------------


def attention_elements(batch_size: int, n_heads: int, seq_len: int) -> int:
    """Elements of one layer's attention-score tensor: ``batch_size * n_heads * seq_len**2``.

    The seed's worked example: 16 x 32 x 1024² = 536,870,912 (about 5.4e8) and
    2 x 32 x 8192² = 4,294,967,296 (about 4.3e9) at the same 16,384 tokens: 8 times more.
    """
    _check_positive_int("batch_size", batch_size)
    _check_positive_int("n_heads", n_heads)
    _check_positive_int("seq_len", seq_len)
    return batch_size * n_heads * seq_len * seq_len


def parameter_count(config: TinyGPTConfig) -> int:
    """Parameters of a :class:`TinyGPT` with this config (weights only; no biases in linears)."""
    d, v, L = config.d_model, config.vocab_size, config.n_layers
    per_block = 2 * (2 * d) + 3 * d * d + d * d + 2 * d * config.d_mlp  # 2 LayerNorms, attn, MLP
    return v * d + L * per_block + 2 * d + v * d  # embedding, blocks, final LN, untied head


@dataclass
class ActivationBreakdown:
    """Predicted bytes of one TinyGPT forward + backward at one shape (:func:`activation_bytes`).

    The first fields are what the forward pass leaves alive for backward, by component; their
    sum is ``saved_total``. ``backward_transient`` is the extra that the worst moment of the
    backward pass adds on top (gradients in flight); ``total`` is the predicted peak and is what
    :func:`measure` is compared with. ``peak_at`` names that worst moment.
    """

    batch_size: int
    seq_len: int
    attn_impl: str
    checkpointing: object
    attention_scores: int
    attention_qkv: int
    mlp_hidden: int
    norms: int
    residual_stream: int
    rope_and_masks: int
    logits_and_loss: int
    saved_total: int
    backward_transient: int
    total: int
    peak_at: str

    def components(self) -> dict[str, int]:
        """The saved-for-backward components plus the backward transient, in bytes."""
        names = (
            "attention_scores",
            "attention_qkv",
            "mlp_hidden",
            "norms",
            "residual_stream",
            "rope_and_masks",
            "logits_and_loss",
            "backward_transient",
        )
        return {name: getattr(self, name) for name in names}


def activation_bytes(
    config: TinyGPTConfig,
    batch_size: int,
    seq_len: int,
    dtype: torch.dtype = torch.float32,
    checkpointing=None,
) -> ActivationBreakdown:
    """Predict the peak bytes (above the weights) of ``model(**batch).loss.backward()``.

    Notation: ``N = batch_size * seq_len`` tokens, ``C = d_model``, ``M = d_mlp``, ``V =
    vocab_size``, ``H = n_heads``, ``L = n_layers``, ``b`` bytes per element of ``dtype``. Every
    term is a tensor autograd keeps for the backward pass of TinyGPT (counted from the ops it
    runs, not fitted); the batch is full rows with no padding mask.

    Saved per block:
      * layer-norm statistics: 2 norms x (mean, rstd) = ``4N`` fp32 values;
      * layer-norm outputs (inputs of the next matmul): ``2 N C``;
      * residual stream after attention and after the MLP: ``2 N C``;
      * MLP hidden (up-projection output and GELU output): ``2 N M``;
      * attention, eager: contiguous q and k, v, the pre-projection output: ``4 N C``, and the
        softmax probabilities: ``B H T²`` (the quadratic term);
      * attention, sdpa: the fused qkv output, rotated q and k, the output: ``6 N C``, and the
        log-sum-exp: ``B H T`` fp32 (no ``T²`` term).
    Shared: the embedding output ``N C``, RoPE cos/sin ``2 N (C / H)``, eager's boolean causal mask
    ``T²`` bytes. Head: final norm (``N C`` + ``2N`` fp32), int64 shifted labels ``8N`` and the
    fp32 log-probabilities ``N V``.

    The peak is the largest of the moments of the backward pass. At the lessons' shapes one of
    three wins:
      * the loss: saved + ``2 N V`` (two gradients of the log-probabilities);
      * the top block's MLP: its GELU gradients in flight;
      * eager only, the top block's softmax: ``2 B H T²`` of gradients on top of what is left;
    with very few tokens, the moments listed below for checkpointing (a lower block, the
    embedding's gradient) can win even without checkpointing, and are scanned too.
    With ``checkpointing`` (``True``/``"blocks"``: whole blocks; ``"attention"``: only the
    attention half; ``config.checkpoint_every = k``: blocks ``0, k, 2k, ...``):
      * a checkpointed block keeps only its input ``N C`` (``"attention"``: its input plus the
        MLP half's own saved set, ``2 N C + 2 N M`` and ``2N`` fp32 statistics);
      * the backward pass reaches block ``i`` holding what blocks ``0..i`` kept, one ``N C``
        gradient, and the weight gradients of the head and of every block above
        (``P_block = 4C + 4C² + 2CM`` values each); the saved inputs above are gone. A
        checkpointed block first runs its forward again, so its whole saved set comes back.
      * every block is then scanned (a lower block can win: it holds more weight gradients)
        for the moments of its backward: the MLP's down- and up-projections, the attention
        (eager: ``att @ v``'s gradients, then the softmax's; sdpa: the fused kernel's ``3 N C``),
        the qkv projection (``3 C²`` of weight gradient), and, while recomputing eager attention,
        the rotary temporaries or the scores and probabilities side by side. Two more: the
        ``lm_head`` backward and the last moment, the embedding's gradient, when every weight's
        gradient is alive (``P b + N C``, ``P`` = :func:`parameter_count`).
    Checkpointing shrinks the activations until the weights' gradients set the floor: at small
    ``N`` the peak sits at the bottom block or at the embedding. Checked against the CPU count
    to the byte (a constant 8-byte loss scalar aside) for eager and sdpa, 1-4 heads, MLP ratios
    1, 2 and 4, vocabularies of 16-260 and ``checkpoint_every`` 1-3.
    """
    _check_positive_int("batch_size", batch_size)
    _check_positive_int("seq_len", seq_len)
    if seq_len > config.max_seq_len:
        raise ValueError(f"seq_len={seq_len} is longer than max_seq_len={config.max_seq_len}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    mode = config.checkpointing if checkpointing is None else checkpointing
    if mode not in (False, True, "blocks", "attention"):
        raise ValueError(f"checkpointing={mode!r} is not one of False, True, 'blocks', 'attention'")
    b = torch.empty((), dtype=dtype).element_size()
    B, T, C, M = batch_size, seq_len, config.d_model, config.d_mlp
    H, L, V, hd = config.n_heads, config.n_layers, config.vocab_size, config.head_dim
    N = B * T
    eager = config.attn_impl == "eager"
    f32 = 4

    # Saved by one block, by component (bytes).
    scores = B * H * T * T * b if eager else 0
    qkv = 4 * N * C * b if eager else 6 * N * C * b + B * H * T * f32
    mlp = 2 * N * M * b
    norms = 2 * N * C * b + 4 * N * f32
    resid = 2 * N * C * b
    block = scores + qkv + mlp + norms + resid

    rope_masks = 2 * N * hd * b + (T * T if eager else 0)
    embed = N * C * b
    head = N * C * b + 2 * N * f32 + 8 * N + N * V * f32
    grads_head = V * C * b + 2 * C * b
    grads_block = (4 * C + 4 * C * C + 2 * C * M) * b  # 2 LayerNorms, qkv + proj, up + down
    grads_mlp_half = 2 * C * M * b + 2 * C * b  # up, down, ln2
    # The MLP half's saved set: its input x + attn, ln2 output and statistics, up and GELU outputs.
    mlp_half = 2 * N * C * b + 2 * N * f32 + 2 * N * M * b

    # What each block keeps for backward, bottom (i = 0) to top.
    every = config.checkpoint_every
    modes = [_block_checkpointing(mode, i, every) for i in range(L)]
    keeps = {False: block, "blocks": N * C * b, "attention": N * C * b + mlp_half}
    kept = [keeps[m] for m in modes]
    n_blocks_ckpt = sum(m == "blocks" for m in modes)
    n_attn_ckpt = sum(m == "attention" for m in modes)
    n_full = L - n_blocks_ckpt - n_attn_ckpt
    saved = rope_masks + embed + sum(kept) + head

    # Candidate peaks of the backward pass (derived from the op order; see docstring). Every block
    # and moment is scanned: at large token counts the loss or the top block wins, but when the
    # activations are small next to the weights' gradients (few tokens, or checkpointing) a lower
    # block or the embedding's gradient is the peak.
    checkpointed = True
    candidates = {"loss": saved + 2 * N * V * f32 - 8 * N}
    if checkpointed:
        # lm_head's backward: the logits' gradient, its weight gradient and dx (wins if C > 2V).
        candidates["head"] = candidates["loss"] - 2 * N * V * f32 + V * C * b + N * C * b
    # Entering block i's backward: everything kept at and below i, the gradients of every block
    # above and of the head; ``embed`` stands in for the one (N, C) gradient flowing down.
    entering = [
        rope_masks + embed + grads_head + sum(kept[: i + 1]) + (L - 1 - i) * grads_block
        for i in range(L)
    ]
    for i in range(L) if checkpointed else [L - 1]:
        name = "top block" if i == L - 1 else f"block {i}"
        ckpt = modes[i]
        whole = entering[i] - kept[i] + block  # block i's whole saved set is alive (again)
        # The MLP half's backward: down-projection weight gradient, then the GELU gradients.
        mlp_at = entering[i] if ckpt == "attention" else whole
        candidates[f"{name} MLP"] = mlp_at + C * M * b + N * M * b
        attn_only = whole - mlp_half + grads_mlp_half  # MLP half done, attention half alive
        if eager:
            # proj's input freed, its weight gradient in, then two (B, H, T, T) gradients.
            softmax = attn_only - N * C * b + C * C * b + 2 * scores
            candidates[f"{name} softmax"] = softmax
        if not checkpointed:
            continue
        # The up-projection's backward: its weight gradient and dx beside the GELU-input
        # gradient, the GELU tensors freed; wins when N is small next to C.
        candidates[f"{name} MLP up"] = mlp_at + 2 * C * M * b - N * M * b + N * C * b
        if eager:
            # Just before the softmax's: att @ v's gradients (d_att, dv) beside dy's copy and v.
            candidates[f"{name} attention backward"] = softmax - scores + 2 * N * C * b
        else:
            # proj's weight gradient, dy, then the fused kernel's q/k/v gradients (3 N C).
            candidates[f"{name} attention backward"] = attn_only + C * C * b + 4 * N * C * b
        # The qkv projection's backward: q/k/v's gradients (3 N C), its weight gradient (3 C²)
        # and dx, once attention's own tensors are gone. A plain bottom block has used RoPE's
        # tables (and the mask) for the last time by then; a checkpointed one holds them still.
        released = rope_masks if i == 0 and not ckpt else 0
        candidates[f"{name} qkv backward"] = (
            attn_only - qkv - scores - released + 4 * C * C * b + 4 * N * C * b
        )
        if ckpt and eager:
            # Recomputing eager attention: ln1 output and statistics, q/k/v (4 N C), then either
            # the rotary temporaries (4 N C) or the masked scores and probabilities with y and its
            # copy (2 B H T² + 2 N C), whichever is larger.
            before = entering[i] if ckpt == "blocks" else entering[i] - mlp_half + grads_mlp_half
            candidates[f"{name} recomputed attention"] = (
                before + 6 * N * C * b + 2 * N * f32 + 2 * max(N * C * b, scores)
            )
    if checkpointed:
        # The last moment: every weight has its gradient, plus the one flowing into the embedding.
        candidates["embedding"] = parameter_count(config) * b + N * C * b
    peak_at = max(candidates, key=candidates.get)
    total = candidates[peak_at]

    # Attention-checkpointed blocks keep their MLP half: ln2 output and statistics, the hidden,
    # and two residual tensors (the block input and x + attn).
    return ActivationBreakdown(
        batch_size=B,
        seq_len=T,
        attn_impl=config.attn_impl,
        checkpointing=mode,
        attention_scores=n_full * scores,
        attention_qkv=n_full * qkv,
        mlp_hidden=(n_full + n_attn_ckpt) * mlp,
        norms=n_full * norms + n_attn_ckpt * (N * C * b + 2 * N * f32) + N * C * b + 2 * N * f32,
        residual_stream=n_full * resid
        + embed
        + n_blocks_ckpt * N * C * b
        + n_attn_ckpt * 2 * N * C * b,
        rope_and_masks=rope_masks,
        logits_and_loss=8 * N + N * V * f32,
        saved_total=saved,
        backward_transient=total - saved,
        total=total,
        peak_at=peak_at,
    )


def _block_checkpointing(mode, index: int, every: int):
    """What block ``index`` recomputes: ``False``, ``"blocks"`` or ``"attention"`` (as TinyGPT)."""
    if not mode or index % every:
        return False
    return "blocks" if mode is True else mode


# --------------------------------------------------------------------------------------------
# Predicted beside measured
# --------------------------------------------------------------------------------------------


def training_step(model: torch.nn.Module, batch: dict) -> float:
    """One forward + backward, the way a training loop writes it; returns the loss as a float.

    ``model(**batch).loss.backward()``: the output object (and its logits) is dropped before the
    backward pass, exactly as in the seed's loop, so nothing extra stays alive.
    """
    loss = model(**batch).loss
    loss.backward()
    return float(loss.detach())


def measure_step(model: torch.nn.Module, batch: dict, device=None) -> MemoryReport:
    """:func:`measure` one :func:`training_step`, with gradients cleared before and after."""
    model.zero_grad(set_to_none=True)  # so the gradients are allocated inside the step
    try:
        return measure(lambda: training_step(model, batch), device=device)
    finally:
        model.zero_grad(set_to_none=True)  # also after an out-of-memory error: free them


@dataclass
class ShapeComparison:
    """One row of predicted-beside-measured: bytes, and their ratio (predicted / measured)."""

    attn_impl: str
    batch_size: int
    seq_len: int
    tokens: int
    predicted_bytes: int
    measured_bytes: int
    method: str
    attention_elements: int

    @property
    def ratio(self) -> float:
        return self.predicted_bytes / self.measured_bytes


def compare_shapes(
    config: TinyGPTConfig,
    shapes,
    attn_impls=("eager", "sdpa"),
    device=None,
    seed: int = 0,
    progress: bool = False,
) -> list[ShapeComparison]:
    """Measure a training step of TinyGPT at each ``(batch_size, seq_len)`` beside the prediction.

    One model is built per attention path (same seed, so the same weights) and moved to
    ``device``; batches are random token ids with every token a label.
    """
    from dataclasses import replace

    from .model import TinyGPT

    dev = _pick_device(device)
    shapes = [(int(b), int(t)) for b, t in shapes]
    if not shapes:
        raise ValueError("compare_shapes needs at least one (batch_size, seq_len) shape")
    rows: list[ShapeComparison] = []
    jobs = [(impl, b, t) for impl in attn_impls for b, t in shapes]
    if progress:
        from tqdm.auto import tqdm

        jobs = tqdm(jobs, desc="measuring shapes")
    models = {}
    for impl, b, t in jobs:
        cfg = replace(config, attn_impl=impl)
        if impl not in models:
            torch.manual_seed(seed)
            models[impl] = TinyGPT(cfg).to(dev)
        gen = torch.Generator().manual_seed(seed + b * 100003 + t)
        ids = torch.randint(0, cfg.vocab_size, (b, t), generator=gen).to(dev)
        report = measure_step(models[impl], {"input_ids": ids, "labels": ids}, device=dev)
        predicted = activation_bytes(cfg, b, t).total
        rows.append(
            ShapeComparison(
                impl,
                b,
                t,
                b * t,
                predicted,
                report.peak_bytes,
                report.method,
                attention_elements(b, cfg.n_heads, t),
            )
        )
    return rows
