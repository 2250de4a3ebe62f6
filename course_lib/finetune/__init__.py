"""The plan for a real fine-tune: a Hugging Face config, full, LoRA or QLoRA, on your card.

:func:`plan_finetune` searches the micro-batch with the one "what fits" search, each probe a
whole prediction of the step on the device, :func:`course_lib.hf.memory.predict_hf_memory`:
weights (16-bit, or NF4 for QLoRA), adapters, gradients, the optimiser's state and its step,
the step's activations, logits and transients, and what the device must hold beyond the
tensors, a band (:mod:`course_lib.hf.cards`: the caching allocator's reserve over what
fragments and the CUDA context, each at both ends of its measured range). A micro-batch fits
when the top of that band, ``device_bytes``, is at most the card's memory.

The recipe: checkpointing only if one row does not fit without it (recomputation costs time),
unless ``checkpointing`` fixes it; then the fewest tokens per step that reach
``target_tokens`` (the largest micro-batch without a target). Every default the plan assumes
(the attention path, the dtype, LoRA targets, the loop, the optimiser's step) is listed in
``assumed``; :class:`FinetunePlan` says which part limits the micro-batch (``decides``) and why
its micro-batch is not the largest that fits; print it, or read its
:meth:`~FinetunePlan.to_dict` (``python -m course_lib plan ... --json``).

One job per file: :mod:`~course_lib.finetune.options` (every option's values; the plan's
settings, checked), :mod:`~course_lib.finetune.predictor` (the remembered predictions the
search probes), :mod:`~course_lib.finetune.search` (:func:`plan_finetune`: the search and the
recipe), :mod:`~course_lib.finetune.plan` (:class:`FinetunePlan`: the numbers and the JSON) and
:mod:`~course_lib.finetune.text` (the plan in words).
"""

from __future__ import annotations

from .options import ATTENTION, FINETUNES, LOOPS, LOSSES, PACKING
from .plan import FinetunePlan
from .search import plan_finetune, resolve_model

__all__ = [
    "ATTENTION", "FINETUNES", "LOOPS", "LOSSES", "PACKING", "FinetunePlan",
    "plan_finetune", "resolve_model",
]  # fmt: skip
