"""The ``--model`` half of ``python -m course_lib plan``: every recipe knob of
:func:`course_lib.finetune.plan_finetune` as a flag (:data:`KNOBS`), and the run, as
:mod:`course_lib.cli` hands them over. No torch here.

Each :class:`Knob` names its flag, the keyword it sets and how the flag's text becomes the
keyword's value; README.md's knob table says which PEFT, Trainer or TRL setting each one mirrors
and ``tests/library/test_cli.py`` holds the two to the same plan, knob for knob. A keyword of
the API without a flag is a test failure, not a silent gap.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .finetune.options import FINETUNES, LOOPS, LOSSES, PACKING
from .hf.cards import ALLOCATORS
from .hf.moe import IMPLEMENTATIONS
from .hf.settings import DEVICES, WEIGHTS
from .hf.states import OPTIMIZERS, SHARDING
from .units import DTYPE_ALIASES, DTYPE_BYTES

ON_OFF = {"on": True, "off": False}
# --optimizer-step: torch.optim.AdamW's three implementations, as fused= and foreach= say them
STEPS = {"fused": dict(fused=True), "foreach": dict(fused=False, foreach=True),
         "for-loop": dict(fused=False, foreach=False)}  # fmt: skip
DTYPES = (*DTYPE_BYTES, *DTYPE_ALIASES)


@dataclass(frozen=True)
class Knob:
    """One ``--model`` flag: its spelling, the :func:`~course_lib.finetune.plan_finetune`
    keyword it sets, argparse's arguments, and the flag's value as keywords (default:
    ``{keyword: value}``)."""

    flag: str
    keyword: str
    options: dict = field(default_factory=dict)
    to_api: Callable[[Any], dict] | None = None

    @property
    def dest(self) -> str:
        """The attribute argparse stores it under."""
        return self.options.get("dest") or self.flag.removeprefix("--").replace("-", "_")

    def kwargs(self, value: Any) -> dict:
        """The keywords the flag's parsed value sets.

        Args:
            value: what argparse stored.

        Returns:
            ``{keyword: value}``, or the converter's keywords.
        """
        return self.to_api(value) if self.to_api else {self.keyword: value}


def _on_off(keyword: str) -> Callable[[str], dict]:
    return lambda text: {keyword: ON_OFF[text]}


KNOBS: list[Knob] = [
    Knob("--finetune", "finetune", dict(choices=FINETUNES,
         help="default: lora (qlora: NF4 weights with double quantisation)")),
    Knob("--lora-rank", "lora_rank", dict(type=int, help="LoRA rank (default: 16)")),
    Knob("--lora-targets", "lora_targets", dict(metavar="NAMES",
         help="q_proj,v_proj, all-linear, and lm_head for the output layer (default: PEFT's "
              "for the family)")),
    Knob("--lora-dropout", "lora_dropout", dict(type=float, metavar="P",
         help="PEFT's lora_dropout (default: 0)")),
    Knob("--adapter-dtype", "adapter_dtype", dict(choices=DTYPES,
         help="the adapters' dtype (default: fp32, PEFT's autocast_adapter_dtype)")),
    Knob("--modules-to-save", "modules_to_save", dict(metavar="NAMES",
         help="PEFT's modules_to_save: embed_tokens and/or lm_head, trained in full beside LoRA")),
    Knob("--weights", "weights", dict(choices=WEIGHTS,
         help="16bit, int8 (LLM.int8) or nf4 (default: 16bit; nf4 with --finetune qlora)")),
    Knob("--double-quant", "double_quant", dict(choices=tuple(ON_OFF),
         help="NF4's second-level quantisation constants (default: on)"), _on_off("double_quant")),
    Knob("--kbit-prepare", "kbit_prepare", dict(choices=tuple(ON_OFF),
         help="prepare_model_for_kbit_training's fp32 upcast of the unquantised weights "
              "(default: on with 4/8-bit weights)"), _on_off("kbit_prepare")),
    Knob("--no-kbit-upcast", "kbit_prepare", dict(dest="kbit_prepare", action="store_const",
         const="off", help="the same as --kbit-prepare off"), _on_off("kbit_prepare")),
    Knob("--bnb-version", "bnb_version", dict(metavar="VERSION",
         help="bitsandbytes' version: before 0.43.2 every 4-bit layer kept its input for the "
              "backward (default: a current one)")),
    Knob("--optimizer", "optimizer", dict(choices=OPTIMIZERS,
         help="default: adamw (torch.optim.AdamW: moments in the trained dtype)")),
    Knob("--optimizer-step", "fused", dict(choices=tuple(STEPS),
         help="AdamW's step: fused (the Trainer's adamw_torch_fused), foreach (torch's CUDA "
              "default, adamw_torch) or for-loop (default: the loop's)"), STEPS.__getitem__),
    Knob("--offload", "offload", dict(action="store_true",
         help="the optimiser's states on the CPU (DeepSpeed offload_optimizer, FSDP CPUOffload)")),
    Knob("--loss", "loss", dict(choices=LOSSES,
         help="standard (fp32 log-probabilities of the full logits; default) or chunked (fused "
              "linear cross-entropy: no full logits)")),
    Knob("--loop", "loop", dict(choices=LOOPS,
         help="trainer (default: outputs dropped before backward, fused AdamW) or plain "
              "(outputs held through backward, foreach AdamW)")),
    Knob("--reentrant", "reentrant", dict(action="store_true",
         help="checkpoint with use_reentrant=True (every transformers 4 release's default)")),
    Knob("--packing", "packing", dict(nargs="?", const="rows", choices=PACKING,
         help="pack documents drawn from --lengths into rows of --seq-len tokens (or "
              "padding-free: end to end); plans the worst micro-batch")),
    Knob("--lengths", "lengths", dict(metavar="NAME|CSV",
         help="document lengths for --packing: wikipedia_512, squad_1_1_384, or a length,count "
              "CSV")),
    Knob("--sharding", "sharding", dict(choices=SHARDING,
         help="how --devices divide states, gradients, weights (default: none)")),
    Knob("--sub-group-size", "sub_group_size", dict(type=int, metavar="N",
         help="--sharding zero3: DeepSpeed's sub_group_size, elements stepped at once "
              "(default: 1e9, DeepSpeed's)")),
    Knob("--master-weights", "master_weights", dict(choices=DTYPES,
         help="FSDP's mixed precision: parameters, gradients and moments in this dtype (fp32), "
              "the step in --dtype (full fine-tune under fsdp or zero3)")),
    Knob("--reduce-dtype", "reduce_dtype", dict(choices=DTYPES,
         help="with --master-weights, the dtype gradients are reduce-scattered in")),
    Knob("--checkpoint-every", "checkpoint_every", dict(type=int, metavar="N",
         help="with checkpointing, every N-th decoder layer (default: 1)")),
    Knob("--micro-batch", "micro_batch", dict(type=int, metavar="B",
         help="predict this micro-batch instead of searching for the largest")),
    Knob("--target-tokens", "target_tokens", dict(type=int,
         help="tokens per optimiser step to reach")),
    Knob("--allocator", "allocator", dict(choices=ALLOCATORS,
         help="default, or expandable (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): the "
              "reserve the device band takes")),
    Knob("--experts", "experts", dict(choices=IMPLEMENTATIONS,
         help="a mixture of experts' experts_implementation (default: grouped_mm)")),
    Knob("--utilisation", "utilisation", dict(type=float, metavar="SHARE",
         help="the share of the card's dense peak the matmuls reach, for the time (default: "
              "0.75, fitted to H200 runs)")),
    Knob("--device", "device", dict(choices=DEVICES,
         help="cuda (default: the card's kernels) or cpu (the bytes PyTorch counts on the CPU)")),
]  # fmt: skip

# flags the --model run shares with the TinyGPT plan (cli.py adds them), by keyword
SHARED = ("dtype", "attn_impl", "checkpointing", "devices", "gpu", "memory_budget", "seq_len",
          "dataset_size")  # fmt: skip


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Add the ``--model`` run's flags (:data:`KNOBS`) and ``--json`` to the ``plan`` parser.

    Args:
        p: the ``plan`` subcommand's parser.
    """
    group = p.add_argument_group("--model run")
    for knob in KNOBS:
        group.add_argument(knob.flag, **knob.options)
    group.add_argument("--json", action="store_true", help="print the plan as one JSON object")


def hf_only() -> tuple[str, ...]:
    """The ``--model`` run's own flags, as argparse stores them (the TinyGPT plan refuses them).

    Returns:
        Their ``dest`` names, each once.
    """
    return tuple(dict.fromkeys(k.dest for k in KNOBS))


def card_budget(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The memory of ``--gpu`` (a shipped card), or a one-line error (exit 2).

    Args:
        args: the parsed flags.
        parser: the ``plan`` parser, for the error.

    Returns:
        The card's memory in bytes.
    """
    from .hf.cards import card_memory

    try:
        return card_memory(args.gpu)
    except ValueError as exc:
        parser.error(f"--gpu: {exc}")


def plan_keywords(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords of :func:`~course_lib.finetune.plan_finetune` the flags give: only those
    given (its own defaults, one definition, for the rest).

    Args:
        args: the parsed, checked flags.

    Returns:
        ``{keyword: value}``.
    """
    given: dict[str, Any] = {}
    for knob in KNOBS:
        value = getattr(args, knob.dest)
        if value is not None and value is not False:
            given.update(knob.kwargs(value))
    for name in ("dtype", "checkpointing", "attn_impl", "devices", "dataset_size"):
        if getattr(args, name) is not None:
            given[name] = getattr(args, name)
    return given


def run_model_plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Plan ``--model``'s fine-tune and print it (a table, or one JSON object with ``--json``).

    Args:
        args: the parsed, checked flags.
        parser: the ``plan`` parser, for one-line errors (exit 2).

    Returns:
        0 when the plan fits (its verdict is "fits"), 1 otherwise.
    """
    from .finetune import plan_finetune

    try:
        result = plan_finetune(
            args.model, args.gpu_memory, args.seq_len, gpu=args.gpu, **plan_keywords(args)
        )
    except ValueError as exc:
        parser.error(str(exc))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.to_table())
    return 0 if result.micro_batch and result.fits else 1
