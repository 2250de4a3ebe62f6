"""How sure a fine-tune plan is that it fits, and what would change the answer. No torch here.

The card must hold a band, not a point (:func:`course_lib.hf.cards.device_band`): the tensors
plus the caching allocator's reserve and the CUDA context, each from the low to the high end of
its measured range. So a plan says one of three things:

* ``"fits"``: at the band's top (the worst reserve and context measured) it is within the card;
* ``"may not fit"``: it fits at the band's low end (the typical reserve) but not at its top: runs
  like it have fitted and have run out of memory;
* ``"does not fit"``: not even at the low end.

With each it gives the largest micro-batch at both ends, and, when the answer is not "fits",
the changes that make it fit (:data:`ADVICE`: ``expandable_segments``, the chunked loss,
activation checkpointing), each planned again with that one change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .plan import FinetunePlan

VERDICTS = ("fits", "may not fit", "does not fit")

# (what to change in words, the flag, the keywords of the change, is it a change for this plan?)
ADVICE: list[tuple[str, str, dict, Callable[[dict], bool]]] = [
    ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "--allocator expandable",
     {"allocator": "expandable"}, lambda c: c.get("allocator", "default") == "default"),
    ("a chunked (fused linear) cross-entropy: Liger-Kernel's, TRL's use_liger_kernel=True",
     "--loss chunked", {"loss": "chunked"},
     lambda c: c.get("loss", "standard") == "standard"
     and "lm_head" not in str(c.get("lora_targets") or "")),
    ("activation checkpointing (gradient_checkpointing=True)", "--checkpointing on",
     {"checkpointing": "blocks"}, lambda c: c.get("checkpointing") in ("off", False)),
]  # fmt: skip


def verdict_of(p: FinetunePlan) -> str:
    """The plan's verdict (module docstring).

    Args:
        p: the plan, its numbers chosen.

    Returns:
        One of :data:`VERDICTS`.
    """
    if p.searched:
        if p.micro_batch:
            return "fits"
        return "may not fit" if any(p.max_micro_batch_low_by_mode.values()) else "does not fit"
    assert p.memory is not None  # a given micro-batch is always predicted
    if p.memory.device_bytes <= p.memory_budget:
        return "fits"
    return "may not fit" if p.memory.device_bytes_low <= p.memory_budget else "does not fit"


def advise(p: FinetunePlan, plan: Callable[..., FinetunePlan]) -> list[dict]:
    """The changes that make a plan that is not "fits" fit, each planned again alone.

    Args:
        p: the plan (its ``call``: the keywords it was planned with).
        plan: :func:`~course_lib.finetune.search.plan_finetune`'s inner planner, called as
            ``plan(call, advise=False)``.

    Returns:
        ``[{"change", "flag", "verdict", "micro_batch"}]``, in :data:`ADVICE`'s order, only
        the changes whose plan fits (empty when ``p`` fits already).
    """
    if verdict_of(p) == "fits":
        return []
    out = []
    for words, flag, change, applies in ADVICE:
        if not applies(p.call):
            continue
        try:
            other = plan({**p.call, **change}, advise=False)
        except ValueError:  # the change is not a recipe for this model (a soft-capped head...)
            continue
        if verdict_of(other) == "fits":
            rows = other.micro_batch or (other.memory.step.batch_size if other.memory else 0)
            out.append({"change": words, "flag": flag, "verdict": "fits", "micro_batch": rows})
    return out
