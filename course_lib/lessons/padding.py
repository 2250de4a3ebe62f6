"""Lesson 2's experiments: padding, packing, and what each costs and risks.

Three schemes see the same examples in an epoch: random batches padded to their longest,
length-grouped batches (:class:`~course_lib.collate.LengthGroupedSampler`) padded the same way,
and rows of ``capacity`` tokens packed by best-fit decreasing (:func:`~course_lib.packing.
pack_lengths`). :func:`batch_layouts` picks a representative batch of each (what the model
computes on); :func:`scheme_batches` builds an epoch of each and :func:`train_schemes` trains on
them epoch by epoch, the schemes taking turns for a few rounds, so that every speed ratio is a
median of paired epochs with its range; :func:`row_length_padding` packs one epoch into rows of
each length at a fixed token budget (the padding long rows save); :func:`careless_runs` trains
one packed run with its document boundaries and one without, and :func:`crossing_share` counts
what the careless one mixes. :mod:`course_lib.figures.padding` draws the results; Hugging Face's
flattening collator is :mod:`course_lib.lessons.flattening`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import torch
from tqdm.auto import tqdm

from .._checks import positive_int
from ..collate import LengthGroupedSampler, PaddingCollator, padding_stats, random_batches
from ..data import PAD_ID
from ..masks import causal_allowed, document_attention_mask
from ..memory.meter import Device, pick_device
from ..model import TinyGPT, TinyGPTConfig
from ..packing import PackingCollator, pack_lengths
from ..timing import CPU_TIMING, Step, interleave, timing_method

SCHEMES = ("random", "length-grouped", "packed")


@dataclass
class Layout:
    """One scheme's representative rows: ``rows[r]`` lists the lengths (tokens) of the documents
    in row ``r``, each row padded to ``width``. ``waste``: padding fraction of these rows;
    ``epoch_waste``: of the whole epoch."""

    scheme: str
    rows: list[list[int]]
    width: int
    waste: float
    epoch_waste: float


@dataclass
class BatchLayouts:
    """:func:`batch_layouts`: one :class:`Layout` per scheme, in :data:`SCHEMES` order."""

    n_examples: int
    mean_length: float
    batch_size: int
    capacity: int
    layouts: list[Layout]


def _typical_padded_batch(scheme: str, lengths: np.ndarray, batches) -> Layout:
    """The batch with the median waste of the epoch, one example per row, longest first."""
    as_lengths = [lengths[b].tolist() for b in batches]
    waste = [padding_stats([b]).waste_fraction for b in as_lengths]
    median = int(np.argsort(waste, kind="stable")[len(waste) // 2])
    typical = as_lengths[median]
    return Layout(
        scheme=scheme,
        rows=[[n] for n in sorted(typical, reverse=True)],
        width=max(typical),
        waste=waste[median],
        epoch_waste=padding_stats(as_lengths).waste_fraction,
    )


def _packed_sample(lengths: np.ndarray, capacity: int, real_tokens: int, seed: int) -> Layout:
    """As many packed rows (picked at random with ``seed``) as hold ``real_tokens``."""
    packed = [lengths[r].tolist() for r in pack_lengths(lengths, capacity)]
    k = min(len(packed), max(1, -(-real_tokens // capacity)))
    picked = sorted(np.random.default_rng(seed).choice(len(packed), size=k, replace=False))
    shown = [packed[i] for i in picked]
    return Layout(
        scheme="packed",
        rows=shown,
        width=capacity,
        waste=1 - sum(map(sum, shown)) / (k * capacity),
        epoch_waste=1 - int(lengths.sum()) / (len(packed) * capacity),
    )


def batch_layouts(
    lengths: Sequence[int] | np.ndarray, batch_size: int, capacity: int, seed: int = 0
) -> BatchLayouts:
    """Representative rows of the three schemes over one epoch of examples of ``lengths`` tokens.

    Random and length-grouped: the batch of ``batch_size`` examples with the median padding
    waste of the epoch (``seed`` shuffles both). Packed: as many rows of ``capacity`` as hold the
    real tokens of that random batch, picked at random (``seed``).

    Args:
        lengths: tokens per example, one epoch.
        batch_size: examples per padded batch.
        capacity: tokens per packed row (at least the longest example).
        seed: shuffles the random and length-grouped epochs and picks the packed rows.

    Returns:
        :class:`BatchLayouts`, one :class:`Layout` per scheme in :data:`SCHEMES` order.

    Raises:
        ValueError: ``lengths`` empty or not 1-D, a size that is not a positive int, or an
            example longer than ``capacity``.
    """
    positive_int("batch_size", batch_size)
    positive_int("capacity", capacity)
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1 or lengths.size == 0:
        raise ValueError(f"lengths must be a non-empty 1-D sequence, got shape {lengths.shape}")
    random_layout = _typical_padded_batch(
        "random", lengths, random_batches(lengths.size, batch_size, seed=seed)
    )
    grouped = _typical_padded_batch(
        "length-grouped", lengths, LengthGroupedSampler(lengths, batch_size, seed=seed).batches()
    )
    real = sum(n for row in random_layout.rows for n in row)
    packed = _packed_sample(lengths, capacity, real, seed)
    layouts = [random_layout, grouped, packed]
    return BatchLayouts(int(lengths.size), float(lengths.mean()), batch_size, capacity, layouts)


# -- long rows at a fixed token budget ---------------------------------------------------------

PACKERS = {"greedy": "next-fit, in the stream's order", "bfd": "best-fit decreasing"}


@dataclass
class RowSplit:
    """One split of the budget: ``batch_size`` rows of ``seq_len`` tokens per step. ``rows``
    and ``waste``: per packer (:data:`PACKERS`), the rows one epoch fills and padding's share of
    their slots."""

    batch_size: int
    seq_len: int
    rows: dict[str, int]
    waste: dict[str, float]


@dataclass
class RowLengthPadding:
    """:func:`row_length_padding`: the same epoch packed at every split of one token budget."""

    token_budget: int
    real_tokens: int
    splits: list[RowSplit]


def row_length_padding(
    lengths: Sequence[int] | np.ndarray, token_budget: int, seq_lens: Sequence[int]
) -> RowLengthPadding:
    """Padding of one epoch packed into rows of each of ``seq_lens`` tokens, the same
    ``token_budget`` tokens per step (``token_budget // seq_len`` rows), by both packers.

    Documents longer than a row are cut into row-sized pieces (``split="chunk"``), as a
    training window does; the padding left is each row's unfilled tail.

    Args:
        lengths: tokens per document, one epoch, in the stream's order (next-fit packs them so).
        token_budget: tokens per optimiser step, the same for every split.
        seq_lens: the row lengths to try; each must divide ``token_budget``.

    Returns:
        :class:`RowLengthPadding`, one :class:`RowSplit` per row length, in the order given.

    Raises:
        ValueError: ``lengths`` empty or not 1-D, a size that is not a positive int, or a row
            length that does not divide the budget.
    """
    positive_int("token_budget", token_budget)
    arr = np.asarray(lengths, dtype=np.int64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"lengths must be a non-empty 1-D sequence, got shape {arr.shape}")
    real, splits = int(arr.sum()), []
    for seq_len in seq_lens:
        positive_int("seq_len", seq_len)
        if token_budget % seq_len:
            raise ValueError(f"seq_len {seq_len} does not divide the budget of {token_budget}")
        rows = {p: len(pack_lengths(arr, seq_len, p, split="chunk")) for p in PACKERS}
        waste = {p: 1 - real / (n * seq_len) for p, n in rows.items()}
        splits.append(RowSplit(token_budget // seq_len, seq_len, rows, waste))
    return RowLengthPadding(token_budget, real, splits)


# -- training throughput ------------------------------------------------------------------------


def scheme_batches(
    examples: Sequence[dict], batch_size: int, capacity: int, rows_per_step: int, seed: int = 0
) -> dict[str, list[dict]]:
    """One epoch of ``examples`` as each scheme batches it (:data:`SCHEMES`).

    Args:
        examples: dicts with ``input_ids`` (and a prompt length for completion-only labels).
        batch_size: examples per padded batch (random and length-grouped).
        capacity: tokens per packed row.
        rows_per_step: packed rows per optimiser step.
        seed: shuffles the random and the length-grouped epochs.

    Returns:
        Scheme name -> its batches: padded batches of ``batch_size`` examples (completion-only
        labels), and ``rows_per_step`` packed rows of ``capacity`` tokens per step.

    Raises:
        ValueError: a size that is not a positive int, or an example the collators refuse.
    """
    positive_int("rows_per_step", rows_per_step)
    lengths = np.array([len(ex["input_ids"]) for ex in examples], dtype=np.int64)
    pad, packer = PaddingCollator(PAD_ID), PackingCollator(capacity, PAD_ID)
    rows = pack_lengths(lengths, capacity)
    shuffled = random_batches(len(examples), batch_size, seed=seed)
    grouped = LengthGroupedSampler(lengths, batch_size, seed=seed)
    return {
        "random": [pad([examples[i] for i in b]) for b in shuffled],
        "length-grouped": [pad([examples[i] for i in b]) for b in grouped],
        "packed": [packer([examples[i] for row in rows[k : k + rows_per_step] for i in row])
                   for k in range(0, len(rows), rows_per_step)],
    }  # fmt: skip


def window_batches(docs: Sequence[list[int]], window: int, batch_size: int = 8,
                   seed: int = 0) -> dict[str, list[dict]]:  # fmt: skip
    """Documents (every token a label) batched three ways for a training ``window``.

    Args:
        docs: token ids per document.
        window: the training window, tokens per packed or window-padded row.
        batch_size: documents per padded batch.
        seed: shuffles the documents into random batches.

    Returns:
        ``"padded to the window"``: random batches padded to the window; ``"padded to the
        longest"``: the same batches padded to their longest document; ``"packed"``: rows of
        ``window`` tokens, two per step.

    Raises:
        ValueError: a document longer than ``window``, an empty one, or a bad size.
    """
    shuffled = random_batches(len(docs), batch_size, seed=seed)
    rows = pack_lengths([len(d) for d in docs], window)
    to_window = PaddingCollator(PAD_ID, completion_only=False, pad_to_multiple_of=window)
    to_longest = PaddingCollator(PAD_ID, completion_only=False)
    packer = PackingCollator(window, PAD_ID, completion_only=False)
    return {
        "padded to the window": [to_window([docs[i] for i in b]) for b in shuffled],
        "padded to the longest": [to_longest([docs[i] for i in b]) for b in shuffled],
        "packed": [packer([docs[i] for row in rows[k : k + 2] for i in row])
                   for k in range(0, len(rows), 2)],
    }  # fmt: skip


@dataclass
class SchemeRun:
    """One scheme's training run: its batches' tokens (:func:`~course_lib.collate.padding_stats`),
    the loss tokens one epoch trains on, and the wall seconds of each timed epoch
    (``round_seconds``, one per round of :func:`train_schemes`)."""

    name: str
    steps: int
    real_tokens: int
    total_slots: int
    loss_tokens: int
    round_seconds: list[float]

    @property
    def seconds(self) -> float:
        """The median seconds of one epoch over the rounds."""
        return statistics.median(self.round_seconds)

    @property
    def waste(self) -> float:
        """Padding's share of the computed slots."""
        return 1 - self.real_tokens / self.total_slots

    @property
    def tokens_per_second(self) -> float:
        """Real (non-pad) tokens trained on per second, at the median epoch."""
        return self.real_tokens / self.seconds


@dataclass
class Throughput:
    """:func:`train_schemes`: one :class:`SchemeRun` per scheme, in the order given, and how the
    seconds were measured (``method``: :func:`course_lib.timing.timing_method`)."""

    runs: list[SchemeRun]
    device: str
    method: str = CPU_TIMING

    def run(self, name: str) -> SchemeRun:
        """The run of scheme ``name``.

        Args:
            name: a scheme of the run (``"packed"``).

        Returns:
            Its :class:`SchemeRun`.

        Raises:
            KeyError: no scheme of that name.
        """
        for r in self.runs:
            if r.name == name:
                return r
        raise KeyError(f"no scheme {name!r}; the schemes are {[r.name for r in self.runs]}")

    def speed_ratios(self, name: str, baseline: str) -> list[float]:
        """Real tokens per second of ``name`` over ``baseline``, one per round.

        Each pair of epochs ran in the same round, back to back, so a busy moment on the machine
        moves one pair, not one scheme.

        Args:
            name: the scheme compared.
            baseline: the scheme it is compared with.

        Returns:
            One ratio per round, in round order.

        Raises:
            KeyError: no scheme of either name.
        """
        a, b = self.run(name), self.run(baseline)
        return [
            (a.real_tokens / sa) / (b.real_tokens / sb)
            for sa, sb in zip(a.round_seconds, b.round_seconds)
        ]

    def speed_ratio(self, name: str, baseline: str) -> tuple[float, float, float]:
        """The median and the range of :meth:`speed_ratios`.

        Args:
            name: the scheme compared.
            baseline: the scheme it is compared with.

        Returns:
            ``(median, lowest, highest)``: the median is robust to one slow round; the range says
            how far this machine's noise moves one pair.

        Raises:
            KeyError: no scheme of either name.
        """
        ratios = self.speed_ratios(name, baseline)
        return statistics.median(ratios), min(ratios), max(ratios)

    def table(self, baseline: str) -> str:
        """Slots, tokens, median seconds and speed per scheme, and the speed against ``baseline``.

        Args:
            baseline: the scheme every speed is compared with.

        Returns:
            A text table, one line per scheme: the median of the paired rounds and their range.

        Raises:
            KeyError: no scheme named ``baseline``.
        """
        head = f"{'scheme':>22} {'steps':>5} {'slots':>7} {'padding':>7} {'real':>7} "
        lines = [head + f"{'loss tok':>8} {'seconds':>8} {'real tok/s':>10}   vs {baseline}"]
        for r in self.runs:
            mid, low, high = self.speed_ratio(r.name, baseline)
            lines.append(
                f"{r.name:>22} {r.steps:>5} {r.total_slots:>7,} {r.waste:>7.1%} "
                f"{r.real_tokens:>7,} {r.loss_tokens:>8,} {r.seconds:>8.3f} "
                f"{r.tokens_per_second:>10,.0f}   {mid:.3g}× ({low:.3g}–{high:.3g}×)"
            )
        return "\n".join(lines)


def _epoch(model: TinyGPT, optimizer: torch.optim.Optimizer, batches: list[dict],
           device: torch.device) -> Step:  # fmt: skip
    """Round ``r``: one optimiser step per batch of the epoch (forward + backward without the
    padding mask: right padding under a causal mask never reaches a real token); returns the
    loss tokens. A warm-up round (``r < 0``) runs the last batch only."""

    def one(batch: dict) -> int:
        batch = {k: v.to(device) if torch.is_tensor(v) else v
                 for k, v in batch.items() if k != "attention_mask"}  # fmt: skip
        out = model(**batch)
        assert out.loss is not None
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return int(out.n_loss_tokens or 0)

    def epoch(r: int) -> int:
        return one(batches[-1]) if r < 0 else sum(one(b) for b in batches)

    return epoch


def train_schemes(
    config: TinyGPTConfig, batches: dict[str, list[dict]], attn_impls: dict[str, str],
    lr: float, seed: int = 0, device: Device = None, progress: bool = False,
    desc: str = "epochs (all schemes)", rounds: int = 3,
) -> Throughput:  # fmt: skip
    """Train one TinyGPT per scheme for ``rounds`` epochs, the schemes taking turns.

    Every scheme starts from the same initial weights (``seed``) and trains with AdamW at
    ``lr``, one optimiser step per batch; the schemes take turns epoch by epoch
    (:func:`course_lib.timing.interleave`), after one untimed warm-up step each.

    Args:
        config: the model; ``attn_impl`` is set per scheme.
        batches: scheme name -> one epoch of batches (:func:`scheme_batches`).
        attn_impls: scheme name -> attention path (``"sdpa"``, ``"varlen"``...).
        lr: the learning rate.
        seed: the initial weights, the same for every scheme.
        device: where to train (``None``: CUDA when available, else the CPU).
        progress: show a progress bar over the rounds.
        desc: the progress bar's label.
        rounds: timed epochs of every scheme (their median and range are reported).

    Returns:
        :class:`Throughput`, one :class:`SchemeRun` per scheme in the order of ``batches``.

    Raises:
        ValueError: ``rounds`` is not a positive int, or a batch the model refuses.
    """
    positive_int("rounds", rounds)
    dev, steps = pick_device(device), {}
    for name, epoch in batches.items():
        torch.manual_seed(seed)  # the same initial weights for every scheme
        model = TinyGPT(replace(config, attn_impl=attn_impls[name])).to(dev)
        steps[name] = _epoch(model, torch.optim.AdamW(model.parameters(), lr=lr), epoch, dev)
    timings = interleave(steps, rounds, warmup=1, device=dev, progress=progress, desc=desc)
    runs = []
    for name, epoch in batches.items():
        s = padding_stats(epoch)
        runs.append(SchemeRun(name, len(epoch), s.real_tokens, s.total_slots,
                              timings.results[name][0], timings.seconds[name]))  # fmt: skip
    return Throughput(runs, str(dev), timing_method(dev))


# -- careless packing ---------------------------------------------------------------------------

CORRECT_RUN = "correct: model(**batch)"
CARELESS_RUN = "careless: no cu_seq_lens / document_ids"
CARELESS_KEYS = ("input_ids", "labels", "position_ids")  # what a careless loop passes


def crossing_share(batches: Sequence[dict]) -> float:
    """The share of causal (query, key) pairs between real tokens that cross a document boundary.

    What attention mixes when a packed batch's boundaries are dropped.

    Args:
        batches: packed batches with ``document_ids`` (-1 on the padding tail).

    Returns:
        Crossing pairs over all causal pairs between real tokens, from 0 to 1.

    Raises:
        ValueError: the batches hold no real token.
    """
    pairs = crossing = 0
    for batch in batches:
        docs = batch["document_ids"]  # (R, T), -1 on the padding tail
        causal = causal_allowed(docs.shape[-1])  # (T, T)
        real = (docs >= 0)[:, :, None] & (docs >= 0)[:, None, :]  # (R, T, T)
        allowed = document_attention_mask(docs)  # (R, T, T): the same document
        pairs += int((causal & real).sum())
        crossing += int((causal & real & ~allowed).sum())
    if not pairs:
        raise ValueError("crossing_share needs packed batches holding at least one real token")
    return crossing / pairs


@dataclass
class PackingRuns:
    """:func:`careless_runs`: the training loss per step of each run, and the trained models."""

    curves: dict[str, list[float]]
    models: dict[str, TinyGPT]


def careless_runs(
    config: TinyGPTConfig, batches: Sequence[dict], lr: float, seed: int = 0,
    device: Device = None, progress: bool = False,
) -> PackingRuns:  # fmt: skip
    """Two varlen TinyGPTs from the same weights trained on the same packed ``batches``.

    One is given every key (:data:`CORRECT_RUN`), one only :data:`CARELESS_KEYS`
    (:data:`CARELESS_RUN`), so its documents attend across their boundaries.

    Args:
        config: the model (trained with ``attn_impl="varlen"``).
        batches: packed batches, one optimiser step each.
        lr: the learning rate (AdamW).
        seed: the initial weights, the same for both runs.
        device: where to train (``None``: CUDA when available, else the CPU).
        progress: show a progress bar per run.

    Returns:
        :class:`PackingRuns`: the loss per step of each run and the trained models.

    Raises:
        ValueError: a batch the model refuses.
    """
    dev, curves, models = pick_device(device), {}, {}
    for name, keep in ((CORRECT_RUN, None), (CARELESS_RUN, CARELESS_KEYS)):
        torch.manual_seed(seed)
        model = TinyGPT(replace(config, attn_impl="varlen")).to(dev)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
        losses = []
        for batch in tqdm(batches, desc=name.split(":")[0], disable=not progress):
            batch = {k: v.to(dev) if torch.is_tensor(v) else v
                     for k, v in batch.items() if keep is None or k in keep}  # fmt: skip
            loss = model(**batch).loss
            assert loss is not None
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
        curves[name], models[name] = losses, model
    return PackingRuns(curves, models)
