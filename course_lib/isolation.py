"""The isolation check: prove that packed documents do not see each other.

A packed forward is correct exactly when every document's logits equal the logits of that
document run alone: ``max |logits_packed - logits_alone| ≤ atol`` over every token of every
document. The loss curve cannot tell you this (a leaking run trains normally); this check can.

When the check fails it re-runs variants to say why:

* run the packed batch again: if the logits change, the model is not deterministic (dropout left
  on, or state kept between calls);
* perturb every other document of each row and watch its neighbours: if their logits move, tokens
  attend across a document boundary (the mask was ignored). In Hugging Face ``transformers``
  (checked with 5.24) eager and SDPA attention isolate packed documents only when the mask is
  derived from ``position_ids`` that restart at 0, which happens only with ``attention_mask=None``
  and no cache, or when the caller passes a prepared 4-D block mask
  (:func:`document_attention_mask`); a forward that builds a KV cache (``use_cache`` defaults to
  True), a 2-D all-ones mask, or missing position ids all fall back to one causal row;
* if no neighbour matters but only each row's first document matches, positions were not reset
  (a model with absolute positions saw row offsets instead of per-document positions).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from course_lib.collate import Example, example_tokens
from course_lib.packing import PackingCollator, document_spans

#: The largest |Δlogits| that still counts as isolated: fp32 rounding of the same sums taken in
#: another order (one attention call per document against one masked call) stays well below it.
ATOL = 1e-5


def default_call(model: Any, batch: dict) -> Any:
    """How the check invokes a model unless told otherwise: ids, reset positions, offsets.

    Suits ``TinyGPT`` (which masks by ``cu_seq_lens``). On a Hugging Face model this is the
    careless call: ``use_cache`` keeps its default (True) and the packing leaks; pass
    ``call=hf_packed_call`` instead.

    Args:
        model: a module called with keyword arguments (``TinyGPT``).
        batch: a packed batch from :class:`~course_lib.packing.PackingCollator`.

    Returns:
        Whatever the model returns: a ``(R, T, V)`` logits tensor or an object with ``.logits``.
    """
    return model(
        input_ids=batch["input_ids"],
        position_ids=batch["position_ids"],
        cu_seq_lens=batch["cu_seq_lens"],
    )


def hf_packed_call(model: Any, batch: dict) -> Any:
    """The correct packed forward for a ``transformers`` causal LM on eager/SDPA attention.

    Position ids that restart at 0, no 2-D mask and no cache: transformers then derives the
    per-document mask itself.

    Args:
        model: a ``transformers`` causal LM.
        batch: a packed batch from :class:`~course_lib.packing.PackingCollator`.

    Returns:
        The model's output (its ``.logits`` are ``(R, T, V)``).
    """
    return model(
        input_ids=batch["input_ids"],
        position_ids=batch["position_ids"],
        attention_mask=None,
        use_cache=False,
    )


@dataclass
class IsolationReport:
    """Result of :func:`check_isolation`. Diffs are max absolute logit differences."""

    isolated: bool
    max_abs_diff: float
    per_document: list[float]  # one per example, in input order
    atol: float
    n_rows: int
    causes: list[str] = field(default_factory=list)  # empty when isolated
    cross_document_diff: float | None = None  # how far neighbours moved logits (if tested)
    built_cache: bool = False  # the forward returned a KV cache

    @property
    def likely_cause(self) -> str | None:
        return self.causes[0] if self.causes else None

    def __str__(self) -> str:
        verdict = "isolated" if self.isolated else "NOT isolated"
        lines = [
            f"{verdict}: max |Δlogits| = {self.max_abs_diff:.3g} (atol {self.atol:g}) over "
            f"{len(self.per_document)} documents in {self.n_rows} rows"
        ]
        lines += [f"  cause: {c}" for c in self.causes]
        return "\n".join(lines)


def _logits(out) -> torch.Tensor:
    logits = out if torch.is_tensor(out) else out.logits
    return logits.detach().float().cpu()


def _on_device_of(model, call: Callable) -> Callable:
    """Wrap ``call`` so that every batch is moved to the device of the model's parameters."""
    params = getattr(model, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    if first is None or first.device.type == "cpu":
        return call
    device = first.device

    def moved(m, batch):
        return call(m, {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()})

    return moved


def _has_cache(out) -> bool:
    if torch.is_tensor(out):
        return False
    # transformers outputs are mappings of their non-None fields; v5 names the cache "cache",
    # v4 "past_key_values" (reading the old attribute on v5 only prints a deprecation warning)
    names = out.keys() if hasattr(out, "keys") else [n for n in vars(out) if not n.startswith("_")]
    return any(
        n in ("cache", "past_key_values") and getattr(out, n, None) is not None for n in names
    )


def _doc_diffs(logits, spans, alone) -> np.ndarray:
    diffs = np.zeros(len(alone))
    for doc, r, a, b in spans:
        d = (logits[r, a:b] - alone[doc]).abs().max().item()
        diffs[doc] = max(diffs[doc], d)
    return diffs


def check_isolation(
    model: Any,
    examples: Sequence[Example],
    capacity: int,
    atol: float = ATOL,
    call: Callable | None = None,
    pad_token_id: int = 0,
    strategy: str = "bfd",
) -> IsolationReport:
    """Compare each document's logits inside packed rows with its logits when run alone.

    ``examples`` are token-id lists or dicts with ``input_ids``; they are packed into rows of
    ``capacity`` tokens by :class:`~course_lib.packing.PackingCollator` (documents longer than
    ``capacity`` are an error). ``call(model, batch)`` runs one forward and returns logits
    ``(R, T, V)`` or an object with ``.logits``; the same call runs the packed batch and each
    document alone (a one-row batch with no padding). Default: :func:`default_call`.
    The model is put in eval mode and run without gradients; its mode is restored after.

    Args:
        model: the model to check (a ``TinyGPT`` or a ``transformers`` causal LM).
        examples: the documents to pack, token-id lists or dicts with ``input_ids``.
        capacity: tokens per packed row.
        atol: largest logit difference still counted as equal (raise it for bf16 models).
        call: ``call(model, batch)`` runs one forward; ``None`` means :func:`default_call`.
        pad_token_id: the id of the padding tail.
        strategy: how the collator packs, ``"bfd"`` (best-fit decreasing) or ``"greedy"``.

    Returns:
        :class:`IsolationReport`; when not isolated, ``causes`` says why in plain words.

    Raises:
        ValueError: a negative ``atol``, or examples the collator refuses (longer than
            ``capacity``, empty).
    """
    if not atol >= 0:
        raise ValueError(f"atol must be ≥ 0, got {atol}")
    call = _on_device_of(model, call or default_call)  # batches are built on the CPU
    collator = PackingCollator(capacity, pad_token_id, completion_only=False, strategy=strategy)
    batch = collator(examples)
    spans = document_spans(batch)
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        with torch.no_grad():
            out = call(model, batch)
            packed = _logits(out)
            alone = []
            for i, ex in enumerate(examples):
                ids, _ = example_tokens(ex, i, completion_only=False)
                one = PackingCollator(ids.size, pad_token_id, completion_only=False)([ids])
                alone.append(_logits(call(model, one))[0])
            diffs = _doc_diffs(packed, spans, alone)
            report = IsolationReport(
                isolated=bool(diffs.max() <= atol),
                max_abs_diff=float(diffs.max()),
                per_document=diffs.tolist(),
                atol=atol,
                n_rows=batch["input_ids"].shape[0],
                built_cache=_has_cache(out),
            )
            if not report.isolated:
                _diagnose(report, model, call, batch, spans, packed, diffs)
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
    return report


def _diagnose(report, model, call, batch, spans, packed, diffs) -> None:
    atol, causes = report.atol, report.causes
    again = _logits(call(model, batch))
    if (again - packed).abs().max().item() > atol:
        causes.append(
            "nondeterministic: the same packed batch gave different logits twice "
            "(dropout in train mode, or state kept between calls); fix that first"
        )
    report.cross_document_diff = _cross_document_diff(model, call, batch, spans, packed)
    leaks = report.cross_document_diff is not None and report.cross_document_diff > atol
    if leaks and report.built_cache:
        causes.append(
            "KV cache: the forward built a cache (use_cache=True, the transformers "
            "default), and with a cache transformers does not derive a per-document "
            "mask from position_ids; pass use_cache=False"
        )
    if leaks:
        causes.append(
            "mask ignored (cross-document attention): changing one document changes "
            "the logits of its neighbours. Give the model the boundaries: cu_seq_lens "
            "or document_ids for TinyGPT; for transformers eager/SDPA, position_ids "
            "reset per document with attention_mask=None and use_cache=False, or a 4-D "
            "block mask (course_lib.masks.document_attention_mask)"
        )
    else:
        first = [diffs[doc] for doc, _, a, _ in spans if a == 0]
        later = [diffs[doc] for doc, _, a, _ in spans if a > 0]
        if first and later and max(first) <= atol < max(later):
            causes.append(
                "positions not reset: only the first document of each row matches, and "
                "no document reads its neighbours, so the model saw row offsets as "
                "positions; pass position_ids that restart at 0 per document"
            )
    if not causes:
        causes.append(
            "unknown: documents differ without reading their neighbours; check dtype "
            "(compare in fp32), padding handling, and what the call passes"
        )


def _cross_document_diff(model, call, batch, spans, packed) -> float | None:
    """Largest logit change of a document when the documents next to it change (None: untested).

    Two passes: perturb documents at even places in their row and watch the odd ones, then the
    reverse, so every document after the first in a row has a changed neighbour before it.
    A token is perturbed by mapping it to the next id among those the batch already uses.
    """
    ids = batch["input_ids"]
    vocab = torch.unique(ids)
    if vocab.numel() < 2:
        return None
    shifted = vocab[(torch.searchsorted(vocab, ids) + 1) % vocab.numel()]  # (R, T)
    place = {}
    for _, r, a, _ in spans:
        place[(r, a)] = sum(1 for _, r2, a2, _ in spans if r2 == r and a2 < a)
    worst = None
    for parity in (0, 1):
        changed = ids.clone()
        watched = []
        for _, r, a, b in spans:
            if place[(r, a)] % 2 == parity:
                changed[r, a:b] = shifted[r, a:b]
            elif a > 0:
                watched.append((r, a, b))
        if not watched:
            continue
        moved = _logits(call(model, {**batch, "input_ids": changed}))
        for r, a, b in watched:
            d = (moved[r, a:b] - packed[r, a:b]).abs().max().item()
            worst = d if worst is None else max(worst, d)
    return worst
