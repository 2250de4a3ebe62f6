"""Lesson 2's Hugging Face path: ``DataCollatorWithFlattening`` feeding a tiny random Llama.

Hugging Face's padding-free packing (``DataCollatorWithFlattening``, what TRL's
``padding_free`` uses) concatenates a batch's examples into one row and restarts
``position_ids`` at every example. On eager or SDPA attention, a ``transformers`` model then
finds the document boundaries *from* those position ids, but only when the forward gets
``attention_mask=None`` and builds no KV cache (``use_cache=False``); a plain forward, whose
``use_cache`` defaults to True, attends the row as one causal sequence (seen with
``transformers`` 5.24).

:func:`flattening_isolation` builds a tiny random ``LlamaForCausalLM`` locally (no download),
hands it the collator's batches and proves isolation with
:func:`course_lib.isolation.check_isolation`, once called the way the packed path needs and
once as a plain forward. Without ``transformers`` (the ``hf`` extra, which ``make lab``
installs) it says so instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..collate import Example, example_tokens
from ..data import VOCAB_SIZE
from ..isolation import IsolationReport, check_isolation, hf_packed_call

PACKED_CALL = "model(input_ids, position_ids, attention_mask=None, use_cache=False)"
PLAIN_CALL = "model(input_ids, position_ids): a plain forward (use_cache defaults to True)"
MISSING = "transformers is not installed (the hf extra: `make lab` or pip install -e '.[hf]')"


def plain_call(model: Any, batch: dict) -> Any:
    """The careless forward of a flattened batch: ids and positions, every default kept.

    Args:
        model: a ``transformers`` causal LM.
        batch: a batch with ``input_ids`` and ``position_ids``.

    Returns:
        The model's output (``use_cache`` keeps its default, True: the call leaks).
    """
    return model(input_ids=batch["input_ids"], position_ids=batch["position_ids"])


@dataclass
class FlatteningCheck:
    """:func:`flattening_isolation`. ``version``: of ``transformers``, ``None`` without it (then
    ``why`` says so and nothing else is filled in). ``example``: what the collator made of the
    first three documents, as lists. ``reports``: one isolation report per call
    (:data:`PACKED_CALL`, :data:`PLAIN_CALL`)."""

    version: str | None
    why: str = ""
    attn_impl: str = "sdpa"
    example: dict[str, list] = field(default_factory=dict)
    reports: dict[str, IsolationReport] = field(default_factory=dict)


def tiny_llama(attn_impl: str = "sdpa", seed: int = 0, vocab_size: int = VOCAB_SIZE) -> Any:
    """A randomly initialised 2-layer ``LlamaForCausalLM``, built from a local config.

    Hidden size 64, 4 heads (2 of them for keys and values), eval mode: nothing is downloaded.

    Args:
        attn_impl: ``transformers``' attention path (``"sdpa"`` or ``"eager"``).
        seed: the random weights (the global generator is left as it was).
        vocab_size: the vocabulary (default: the course's byte vocabulary).

    Returns:
        The model.

    Raises:
        ImportError: ``transformers`` is not installed.
        AssertionError: ``transformers`` picked another attention path than ``attn_impl``.
    """
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        auto = transformers.AutoModelForCausalLM
        model = auto.from_config(config, attn_implementation=attn_impl).eval()
    if model.config._attn_implementation != attn_impl:
        raise AssertionError(
            f"asked for {attn_impl} attention, got {model.config._attn_implementation}"
        )
    return model


def flattened(collator: Any, forward: Callable[[Any, dict], Any]) -> Callable[[Any, dict], Any]:
    """A ``check_isolation`` call that hands every packed row to ``collator`` again.

    Each row's segments (where its position ids restart: every document, and the padding tail)
    go to the collator as examples; ``forward(model, batch)`` runs on the one flattened row the
    collator returns, and the logits are laid back into the rows, so the model sees exactly the
    collator's batch.

    Args:
        collator: called with ``[{"input_ids": [...]}, ...]``, returns one flattened row
            (``DataCollatorWithFlattening``).
        forward: ``forward(model, batch)`` -> the model's output or its logits.

    Returns:
        ``call(model, batch)``: the output with its logits ``(R, T, V)`` laid out as the packed
        rows (and its cache, if the forward built one), or the logits themselves.
    """

    def call(model: Any, batch: dict) -> Any:
        ids, positions = batch["input_ids"], batch["position_ids"]  # (R, T)
        rows, width = ids.shape
        starts = (positions.reshape(-1) == 0).nonzero().flatten().tolist() + [rows * width]
        flat = ids.reshape(-1).tolist()
        features = [{"input_ids": flat[a:b]} for a, b in zip(starts, starts[1:])]
        out = forward(model, collator(features))  # one row of rows * width tokens
        if torch.is_tensor(out):
            return out.reshape(rows, width, -1)  # (1, R * T, V) -> (R, T, V)
        out["logits"] = out.logits.reshape(rows, width, -1)
        return out

    return call


def flattening_isolation(
    examples: Sequence[Example], capacity: int, attn_impl: str = "sdpa", seed: int = 0
) -> FlatteningCheck:
    """Isolation of ``DataCollatorWithFlattening``'s batches in a tiny random Llama.

    The model (:func:`tiny_llama`) is called as :data:`PACKED_CALL` and as :data:`PLAIN_CALL`.
    ``examples`` are packed by ``check_isolation`` into rows of ``capacity`` tokens, every row is
    flattened again by the collator (:func:`flattened`), and each document's logits are compared
    with its logits alone.

    Args:
        examples: token-id lists, or dicts with ``input_ids``.
        capacity: tokens per packed row (at least the longest example).
        attn_impl: ``transformers``' attention path (``"sdpa"`` or ``"eager"``).
        seed: the model's random weights.

    Returns:
        :class:`FlatteningCheck`; without ``transformers`` only ``why`` is filled in.

    Raises:
        ValueError: examples the packing collator refuses (longer than ``capacity``, empty).
    """
    try:
        import transformers
        from transformers import DataCollatorWithFlattening
    except ImportError:
        return FlatteningCheck(None, why=MISSING)
    model = tiny_llama(attn_impl, seed)
    collator = DataCollatorWithFlattening()
    first = [example_tokens(ex, i, completion_only=False)[0].tolist() for i, ex in
             enumerate(examples[:3])]  # fmt: skip
    shown = collator([{"input_ids": ids} for ids in first])
    example = {k: v.tolist() if torch.is_tensor(v) else v for k, v in shown.items()}
    reports = {
        what: check_isolation(model, examples, capacity, call=flattened(collator, forward))
        for what, forward in ((PACKED_CALL, hf_packed_call), (PLAIN_CALL, plain_call))
    }
    return FlatteningCheck(transformers.__version__, "", attn_impl, example, reports)
