"""Lesson 2's experiments: padding, packing, and what each costs and risks.

Three schemes see the same examples in an epoch: random batches padded to their longest,
length-grouped batches (:class:`~course_lib.collate.LengthGroupedSampler`) padded the same way,
and rows of ``capacity`` tokens packed by best-fit decreasing (:func:`~course_lib.packing.
pack_lengths`). :func:`batch_layouts` picks a representative batch of each (what the model
computes on); :func:`scheme_batches` builds an epoch of each and :func:`train_schemes` trains on
them turn by turn to measure throughput; :func:`careless_runs` trains one packed run with its
document boundaries and one without, and :func:`crossing_share` counts what the careless one
mixes. :mod:`course_lib.figures.padding` draws the results.
"""

from __future__ import annotations

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
from ..timing import Step, interleave

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

    Raises:
        ValueError: ``lengths`` empty or not 1-D, or a size that is not a positive int.
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


# -- training throughput ------------------------------------------------------------------------


def scheme_batches(
    examples: Sequence[dict], batch_size: int, capacity: int, rows_per_step: int, seed: int = 0
) -> dict[str, list[dict]]:
    """One epoch of ``examples`` as each scheme batches it (:data:`SCHEMES`): padded batches of
    ``batch_size`` examples (completion-only labels), and ``rows_per_step`` packed rows of
    ``capacity`` tokens per step.

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
    """Documents (every token a label) batched three ways for a training ``window``: random
    batches padded to the window, the same batches padded to their longest document, and
    packed rows of ``window`` tokens, two per step."""
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
    the loss tokens it trained on and its wall seconds, summed over its steps."""

    name: str
    steps: int
    real_tokens: int
    total_slots: int
    loss_tokens: int
    seconds: float

    @property
    def waste(self) -> float:
        """Padding's share of the computed slots."""
        return 1 - self.real_tokens / self.total_slots

    @property
    def tokens_per_second(self) -> float:
        """Real (non-pad) tokens trained on per second."""
        return self.real_tokens / self.seconds


@dataclass
class Throughput:
    """:func:`train_schemes`: one :class:`SchemeRun` per scheme, in the order given."""

    runs: list[SchemeRun]
    device: str

    def run(self, name: str) -> SchemeRun:
        """The run of scheme ``name``."""
        return next(r for r in self.runs if r.name == name)

    def table(self, baseline: str) -> str:
        """Slots, tokens, seconds and speed per scheme, speed also relative to ``baseline``."""
        base = self.run(baseline).tokens_per_second
        head = f"{'scheme':>22} {'steps':>5} {'slots':>7} {'padding':>7} {'real':>7} "
        lines = [head + f"{'loss tok':>8} {'seconds':>8} {'real tok/s':>10} {'vs ' + baseline:>10}"]
        for r in self.runs:
            rate = r.tokens_per_second
            lines.append(
                f"{r.name:>22} {r.steps:>5} {r.total_slots:>7,} {r.waste:>7.0%} "
                f"{r.real_tokens:>7,} {r.loss_tokens:>8,} {r.seconds:>8.2f} {rate:>10,.0f} "
                f"{rate / base:>9.2f}×"
            )
        return "\n".join(lines)


def _optimiser_step(model: TinyGPT, optimizer: torch.optim.Optimizer, batches: list[dict],
                    device: torch.device) -> Step:  # fmt: skip
    """Step ``r``: forward + backward batch ``r`` (without its padding mask: right padding under a
    causal mask never reaches a real token) and one optimiser step; returns its loss tokens."""

    def step(r: int) -> int | None:
        batch = {k: v.to(device) if torch.is_tensor(v) else v
                 for k, v in batches[r].items() if k != "attention_mask"}  # fmt: skip
        out = model(**batch)
        assert out.loss is not None
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return out.n_loss_tokens

    return step


def train_schemes(
    config: TinyGPTConfig, batches: dict[str, list[dict]], attn_impls: dict[str, str],
    lr: float, seed: int = 0, device: Device = None, progress: bool = False,
    desc: str = "steps (all schemes)",
) -> Throughput:  # fmt: skip
    """Train one TinyGPT per scheme (the same initial weights, ``attn_impls[name]`` attention,
    AdamW at ``lr``), one optimiser step per batch, the schemes taking turns step by step
    (:func:`course_lib.timing.interleave`, one untimed warm-up round)."""
    dev, steps = pick_device(device), {}
    for name, epoch in batches.items():
        torch.manual_seed(seed)  # the same initial weights for every scheme
        model = TinyGPT(replace(config, attn_impl=attn_impls[name])).to(dev)
        steps[name] = _optimiser_step(
            model, torch.optim.AdamW(model.parameters(), lr=lr), epoch, dev
        )
    rounds = {name: len(epoch) for name, epoch in batches.items()}
    timings = interleave(steps, rounds, warmup=1, device=dev, progress=progress, desc=desc)
    runs = []
    for name, epoch in batches.items():
        s = padding_stats(epoch)
        loss_tokens = sum(int(n or 0) for n in timings.results[name])
        runs.append(SchemeRun(name, len(epoch), s.real_tokens, s.total_slots, loss_tokens,
                              timings.total(name)))  # fmt: skip
    return Throughput(runs, str(dev))


# -- careless packing ---------------------------------------------------------------------------

CORRECT_RUN = "correct: model(**batch)"
CARELESS_RUN = "careless: no cu_seq_lens / document_ids"
CARELESS_KEYS = ("input_ids", "labels", "position_ids")  # what a careless loop passes


def crossing_share(batches: Sequence[dict]) -> float:
    """The share of causal (query, key) pairs between real tokens of packed ``batches`` that
    cross a document boundary: what attention mixes when the boundaries are dropped."""
    pairs = crossing = 0
    for batch in batches:
        docs = batch["document_ids"]  # (R, T), -1 on the padding tail
        causal = causal_allowed(docs.shape[-1])  # (T, T)
        real = (docs >= 0)[:, :, None] & (docs >= 0)[:, None, :]  # (R, T, T)
        allowed = document_attention_mask(docs)  # (R, T, T): the same document
        pairs += int((causal & real).sum())
        crossing += int((causal & real & ~allowed).sum())
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
    """Two varlen TinyGPTs from the same weights trained on the same packed ``batches``: one
    given every key (:data:`CORRECT_RUN`), one only :data:`CARELESS_KEYS` (:data:`CARELESS_RUN`),
    so its documents attend across their boundaries."""
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
