"""What a fine-tune plan chose and the bytes behind it: :class:`FinetunePlan`, its numbers and
its JSON (its words are :mod:`~course_lib.finetune.text`'s, written into it once the numbers are
chosen). No torch here.

The plan's bytes are :func:`course_lib.hf.memory.predict_hf_memory`'s at the chosen micro-batch:
``peak_bytes`` (the tensors, what ``max_memory_allocated`` reports, a point), the device band
``device_bytes_low`` to ``device_bytes`` (the reserve over what fragments and the CUDA context,
at both ends: the plan fits at the top), ``components`` (``peak_bytes`` by part at the moment
that decides it) and ``decides`` (the part that grows most with one more row: what limits the
micro-batch).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._checks import Checkpointing
from ..hf.arch import arch_parameter_count, architecture
from ..hf.cards import CAPABILITY
from ..hf.memory import HFMemory, trainable_parameters
from ..hf.speed import CARD_SPEED, MATMUL_UTILISATION, StepTime, step_seconds
from ..units import table
from .options import Settings
from .predictor import Predictor


@dataclass
class FinetunePlan:
    """What :func:`~course_lib.finetune.plan_finetune` chose, the bytes behind it, and warnings
    in plain words (``print()`` it; :meth:`to_dict` for JSON).

    The fields it shares with :class:`course_lib.plan.Plan` have the same names and meaning:
    ``seq_len``, ``memory_budget`` (bytes per device), ``micro_batch``, ``grad_accum_steps``,
    ``checkpointing``, ``max_micro_batch``, ``tokens_per_step``, ``effective_batch_size``,
    ``weights``, ``gradients``, ``optimizer_state``, ``notes``, ``warnings``. Sizes are bytes.
    ``memory`` is the prediction at the plan; ``assumed`` the defaults it took, in words.
    """

    model: str
    config: dict
    seq_len: int
    memory_budget: int
    card: str | None
    target_tokens: int | None
    settings: Settings
    assumed: list[str]
    predictor: Predictor = field(repr=False)
    finetune: str = "lora"
    max_micro_batch_by_mode: dict[Checkpointing, int] = field(default_factory=dict)
    # the same at the device band's low end (the typical reserve and context)
    max_micro_batch_low_by_mode: dict[Checkpointing, int] = field(default_factory=dict)
    checkpointing: Checkpointing = "off"
    micro_batch: int = 0
    grad_accum_steps: int = 0
    memory: HFMemory | None = None
    searched: bool = True
    fits: bool = False
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lines: list[tuple[str, str]] = field(default_factory=list, repr=False)  # the table's rows
    call: dict = field(default_factory=dict, repr=False)  # the keywords it was planned with
    advice: list[dict] = field(default_factory=list)  # changes that make it fit (verdict.py)
    # "fits", "may not fit" (fits at the device band's low end only), "does not fit"
    verdict: str = ""
    dataset_size: int | None = None  # training examples (packed: documents), for the epoch
    utilisation: float = MATMUL_UTILISATION  # the share of the card's peak the matmuls reach

    def __post_init__(self) -> None:
        """The kind of fine-tune, read off the settings."""
        s = self.settings
        self.finetune = "full" if s.lora_rank is None else (
            "qlora" if s.weights == "nf4" else "lora")  # fmt: skip

    # -- the settings, as the plan read them ----------------------------------------------------

    @property
    def dtype(self) -> str:
        """The model's dtype name (``"bfloat16"``...)."""
        return self._any.step.dtype

    @property
    def lora_rank(self) -> int | None:
        """LoRA's rank (``None``: a full fine-tune)."""
        return self.settings.lora_rank

    @property
    def lora_targets(self) -> tuple:
        """The projections that got an adapter (empty for a full fine-tune)."""
        return self._any.step.lora_targets

    @property
    def attn_impl(self) -> str:
        """The attention path."""
        return self._any.step.attn_impl

    @property
    def devices(self) -> int:
        """Data-parallel devices."""
        return self.settings.devices

    @property
    def _any(self) -> HFMemory:
        """The plan's prediction, or the one-row one when nothing fits."""
        return self.memory or self.predictor(self.checkpointing, 1)

    # -- the bytes ------------------------------------------------------------------------------

    @property
    def n_params(self) -> int:
        """Parameters of the model."""
        return arch_parameter_count(architecture(self.config))

    @property
    def n_trainable(self) -> int:
        """Trainable parameters (the adapters' for LoRA)."""
        return trainable_parameters(self.config, self.lora_rank, self.settings.lora_targets)

    def _part(self, name: str) -> int:
        return self._any.components.get(name, 0)

    @property
    def weights(self) -> int:
        """Bytes of the stored weights per device."""
        return self._part("weights")

    @property
    def adapters(self) -> int:
        """Bytes of the LoRA adapters per device."""
        return self._part("adapters")

    @property
    def gradients(self) -> int:
        """Bytes of the trained parameters' gradients per device, all of them."""
        return self._part("gradients")

    @property
    def optimizer_state(self) -> int:
        """Bytes of the optimiser's state per device (in device memory)."""
        return self._part("optimizer_state")

    @property
    def fixed(self) -> int:
        """Bytes that do not depend on the batch: weights, adapters and optimiser state."""
        return self.weights + self.adapters + self.optimizer_state

    @property
    def peak_bytes(self) -> int:
        """The allocated peak at the plan (0 when nothing fits)."""
        return self.memory.peak_bytes if self.memory and self.micro_batch else 0

    @property
    def device_bytes(self) -> int:
        """What the device holds at the plan: reserve and context added (0: nothing fits)."""
        return self.memory.device_bytes if self.memory and self.micro_batch else 0

    total = device_bytes  # what the plan compares with the budget

    @property
    def components(self) -> dict[str, int]:
        """``peak_bytes`` by part at the moment that decides it (name -> bytes)."""
        return dict(self.memory.at_peak) if self.memory and self.micro_batch else {}

    @property
    def device_bytes_low(self) -> int:
        """The band's bottom at the plan (:mod:`course_lib.hf.cards`; 0: nothing fits)."""
        return self.memory.device_bytes_low if self.memory and self.micro_batch else 0

    @property
    def growth(self) -> dict[str, int]:
        """Bytes each part of the allocated peak adds with one more row at the plan (name ->
        bytes; empty when nothing fits): what limits the micro-batch."""
        if not (self.memory and self.micro_batch):
            return {}
        now, more = self.memory.at_peak, self.predictor(self.checkpointing, self.micro_batch + 1)
        return {k: more.at_peak.get(k, 0) - now.get(k, 0) for k in {*now, *more.at_peak}}

    @property
    def decides(self) -> str:
        """The part whose growth limits the plan: the one that grows most with one more row
        (the largest part when none grows, or when nothing fits; ``""`` then)."""
        grows = {k: v for k, v in self.growth.items() if v > 0}
        if grows:
            return max(sorted(grows), key=lambda k: grows[k])
        return self.memory.decides if self.memory and self.micro_batch else ""

    @property
    def peak_at(self) -> str:
        """The op (or ``"optimizer.step"``) at the peak."""
        return self.memory.peak_at if self.memory else ""

    @property
    def activations_per_row(self) -> dict[Checkpointing, int]:
        """Bytes one more row adds to the allocated peak, by checkpointing mode (between one
        and two rows: the peak is a line in the rows)."""
        return {m: self.predictor(m, 2).peak_bytes - self.predictor(m, 1).peak_bytes
                for m in ("off", "blocks")}  # fmt: skip

    # -- the numbers ----------------------------------------------------------------------------

    @property
    def max_micro_batch(self) -> int | None:
        """The largest micro-batch that fits with the plan's checkpointing (``None``: the
        plan predicted a given micro-batch instead of searching)."""
        return self.max_micro_batch_by_mode.get(self.checkpointing) if self.searched else None

    @property
    def max_micro_batch_low(self) -> int | None:
        """The largest micro-batch that fits at the device band's low end, with the plan's
        checkpointing (``None``: the plan predicted a given micro-batch)."""
        return self.max_micro_batch_low_by_mode.get(self.checkpointing) if self.searched else None

    @property
    def effective_batch_size(self) -> int:
        """Rows per optimiser step, over every device."""
        return self.micro_batch * self.grad_accum_steps * self.devices

    @property
    def tokens_per_step(self) -> int:
        """Tokens per optimiser step, over every device (packed rows: the expected fill)."""
        per_row = self.predictor.tokens_per_row()
        return round(self.effective_batch_size * per_row)

    @property
    def step_time(self) -> StepTime | None:
        """Seconds of one optimiser step on one device and what they are made of
        (:func:`course_lib.hf.speed.step_seconds`, on the expected micro-batch when packing);
        ``None`` without a plan or without a shipped card's published peak."""
        if not self.micro_batch or not self.card or self.card not in CARD_SPEED:
            return None
        m = self.predictor(self.checkpointing, self.micro_batch, expected=True)
        return step_seconds(m.step.flops, self.card, self.grad_accum_steps,
                            self.gradients, self.utilisation, self.dtype)  # fmt: skip

    @property
    def recompute_factor(self) -> float:
        """The operations of a checkpointed step over those of the same step without
        checkpointing (one row: every layer's forward again)."""
        f = self.predictor("blocks", 1).step.flops
        ops = {k: v for k, v in f.items() if not k.endswith("@written")}
        done = sum(v for k, v in ops.items() if not k.startswith("recompute"))
        return sum(ops.values()) / done if done else 1.0

    @property
    def tokens_per_second(self) -> float:
        """Tokens a second over every device (0.0 without a time)."""
        t = self.step_time
        return self.tokens_per_step / t.total if t else 0.0

    @property
    def steps_per_epoch(self) -> int | None:
        """Optimiser steps in one pass over ``dataset_size`` examples (``None``: no size)."""
        if not self.dataset_size or not self.micro_batch:
            return None
        per_step = self.effective_batch_size * self.predictor.documents_per_row()
        return -(-self.dataset_size // max(1, int(per_step)))

    @property
    def epoch_seconds(self) -> float | None:
        """Seconds of one epoch (``None``: no size or no time)."""
        t, steps = self.step_time, self.steps_per_epoch
        return t.total * steps if t and steps else None

    def choose(self, mode: Checkpointing, rows: int, searched: bool) -> None:
        """Fix the plan at ``rows`` rows with checkpointing ``mode``.

        Args:
            mode: ``"off"`` or ``"blocks"``.
            rows: the micro-batch.
            searched: the search found ``rows`` (``False``: the caller asked for it).
        """
        self.checkpointing, self.searched = mode, searched
        self.memory = self.predictor(mode, rows)
        self.fits = self.memory.device_bytes <= self.memory_budget
        fitting = self.fits if not searched else bool(self.max_micro_batch_by_mode[mode])
        self.micro_batch = rows if fitting or not searched else 0
        if not searched and self.target_tokens:
            per_step = rows * self.devices * self.predictor.tokens_per_row()
            self.grad_accum_steps = max(1, -(-self.target_tokens // max(1, int(per_step))))
        elif not searched:
            self.grad_accum_steps = 1
        if not self.micro_batch:
            self.grad_accum_steps = 0

    # -- as text and JSON -----------------------------------------------------------------------

    def to_table(self) -> str:
        """The plan as text (what ``print(plan)`` shows).

        Returns:
            The rows, notes and warnings, as text.
        """
        return table(self.lines, self.notes, self.warnings)

    __str__ = to_table

    def to_dict(self) -> dict[str, object]:
        """The plan as one JSON-ready dict (what ``--json`` prints): the bytes, the numbers,
        the settings and the defaults assumed.

        Returns:
            A dict of plain values (ints, strings, lists, dicts).
        """
        m = self._any
        band = m.band
        return {
            "model": self.model, "model_type": self.config.get("model_type"),
            "n_params": self.n_params, "n_trainable": self.n_trainable, "dtype": self.dtype,
            "finetune": self.finetune, "lora_rank": self.lora_rank,
            "lora_targets": list(self.lora_targets), "attn_impl": self.attn_impl,
            **{k: getattr(self.settings, k) for k in ("optimizer", "loss", "loop", "devices",
                                                      "sharding", "checkpoint_every")},
            "packing": self.predictor.packing, "seq_len": self.seq_len, "gpu": self.card,
            "memory_budget": self.memory_budget, "peak_bytes": self.peak_bytes,
            "device_bytes": self.device_bytes, "device_bytes_low": self.device_bytes_low,
            "device_bytes_high": self.device_bytes, "reserved_bytes": m.reserved_bytes if
            self.micro_batch else 0, "context_bytes": band.context[1],
            "context_bytes_band": list(band.context), "reserve_ratio": band.ratio[1],
            "reserve_ratio_band": list(band.ratio), "workload": self.settings.workload,
            "allocator": self.settings.allocator, "micro_batch_reason": self.why_micro_batch,
            "components": self.components, "peak_at": self.peak_at, "decides": self.decides,
            "decides_share": round(self.components.get(self.decides, 0) / self.peak_bytes, 4)
            if self.peak_bytes else 0.0, "decides_growth_per_row": self.growth.get(self.decides, 0),
            "fits": self.fits, "max_micro_batch": self.max_micro_batch,
            "max_micro_batch_by_mode": dict(self.max_micro_batch_by_mode),
            "micro_batch": self.micro_batch, "grad_accum_steps": self.grad_accum_steps,
            "effective_batch_size": self.effective_batch_size,
            "tokens_per_step": self.tokens_per_step, "target_tokens": self.target_tokens,
            "checkpointing": self.checkpointing, "paged_bytes": m.paged_bytes,
            "verdict": self.verdict, "max_micro_batch_low": self.max_micro_batch_low,
            # what the verdict is about: the plan, or when nothing fits for sure, one row
            "verdict_micro_batch": m.step.batch_size, "verdict_peak_bytes": m.peak_bytes,
            "verdict_band": [m.device_bytes_low, m.device_bytes],
            "verdict_components": dict(m.at_peak),
            "max_micro_batch_low_by_mode": dict(self.max_micro_batch_low_by_mode),
            "advice": [dict(a) for a in self.advice], "settings": self.settings.as_dict(),
            **self._time_dict(),
            "assumed": list(self.assumed), "notes": list(self.notes),
            "warnings": list(self.warnings),
        }  # fmt: skip

    def _time_dict(self) -> dict[str, object]:
        """The time's part of :meth:`to_dict` (zeros and ``None`` without a time)."""
        t = self.step_time
        return {"step_seconds": t.total if t else None,
                "step_seconds_by_part": {"compute": t.compute, "memory": t.memory,
                                         "optimizer": t.optimizer} if t else {},
                "flops_per_step": dict(t.flops) if t else {},
                "tokens_per_second": self.tokens_per_second, "utilisation": self.utilisation,
                "dataset_size": self.dataset_size, "steps_per_epoch": self.steps_per_epoch,
                "epoch_seconds": self.epoch_seconds}  # fmt: skip

    @property
    def why_micro_batch(self) -> str:
        """Why the plan's micro-batch is not the largest that fits, in words (``""``: it is)."""
        top = self.max_micro_batch
        other: Checkpointing = "off" if self.checkpointing == "blocks" else "blocks"
        if not self.micro_batch or top is None:
            return ""
        if self.micro_batch < top:
            return (f"the token target chose it: {self.micro_batch} x {self.grad_accum_steps} "
                    f"step(s) x {self.devices} device(s) is the fewest tokens per step that "
                    f"reach {self.target_tokens:,}; the largest micro-batch, {top}, would take "
                    "more")  # fmt: skip
        more = self.max_micro_batch_by_mode.get(other, 0)
        if self.checkpointing == "off" and more > top:
            return (f"checkpointing is off because one row fits without it (recomputing runs "
                    f"{self.recompute_factor:.2f}x the operations a step); with it {more} rows "
                    "would fit")  # fmt: skip
        return ""

    def capability(self) -> tuple[int, int] | None:
        """The card's compute capability, when a shipped card was named.

        Returns:
            ``(major, minor)``, or ``None`` without a shipped card.
        """
        return CAPABILITY.get(self.card or "")
