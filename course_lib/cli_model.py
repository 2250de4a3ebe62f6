"""The ``--model`` half of ``python -m course_lib plan``: its flags and its run
(:func:`course_lib.finetune.plan_finetune`), as :mod:`course_lib.cli` hands them over. No
torch here."""

from __future__ import annotations

import argparse
import json

from .finetune.options import FINETUNES, LOOPS, LOSSES, PACKING
from .hf.cards import ALLOCATORS
from .hf.states import OPTIMIZERS, SHARDING

# The --model run's flags, as argparse.add_argument's arguments.
MODEL_FLAGS: list[tuple[str, dict]] = [
    ("--finetune", dict(choices=FINETUNES,
                        help="default: lora (qlora: NF4 weights with double quantisation)")),
    ("--lora-rank", dict(type=int, help="LoRA rank (default: 16)")),
    ("--lora-targets", dict(metavar="NAMES",
                            help="q_proj,v_proj or all-linear (default: PEFT's for the family)")),
    ("--optimizer", dict(choices=OPTIMIZERS,
                         help="default: adamw (torch.optim.AdamW: moments in the trained dtype)")),
    ("--loss", dict(choices=LOSSES,
                    help="standard (fp32 log-probabilities of the full logits; default) or "
                         "chunked (fused linear cross-entropy: no full logits)")),
    ("--loop", dict(choices=LOOPS,
                    help="trainer (default: outputs dropped before backward, fused AdamW) or "
                         "plain (outputs held through backward, foreach AdamW)")),
    ("--packing", dict(nargs="?", const="rows", choices=PACKING,
                       help="pack documents drawn from --lengths into rows of --seq-len tokens "
                            "(or padding-free: end to end); plans the worst micro-batch")),
    ("--lengths", dict(metavar="NAME|CSV",
                       help="document lengths for --packing: wikipedia_512, squad_1_1_384, or "
                            "a length,count CSV")),
    ("--sharding", dict(choices=SHARDING,
                        help="how --devices divide states, gradients, weights (default: none)")),
    ("--checkpoint-every", dict(type=int, metavar="N",
                                help="with checkpointing, every N-th decoder layer (default: 1)")),
    ("--micro-batch", dict(type=int, metavar="B",
                           help="predict this micro-batch instead of searching for the largest")),
    ("--target-tokens", dict(type=int, help="tokens per optimiser step to reach")),
    ("--allocator", dict(choices=ALLOCATORS,
                         help="default, or expandable (PYTORCH_CUDA_ALLOC_CONF="
                              "expandable_segments:True): the reserve the device band takes")),
    ("--json", dict(action="store_true", help="print the plan as one JSON object")),
]  # fmt: skip


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """Add the ``--model`` run's flags (:data:`MODEL_FLAGS`) to the ``plan`` parser.

    Args:
        p: the ``plan`` subcommand's parser.
    """
    group = p.add_argument_group("--model run")
    for flag, kwargs in MODEL_FLAGS:
        group.add_argument(flag, **kwargs)


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


def run_model_plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Plan ``--model``'s fine-tune and print it (a table, or one JSON object with ``--json``).

    Args:
        args: the parsed, checked flags.
        parser: the ``plan`` parser, for one-line errors (exit 2).

    Returns:
        0 when the plan fits, 1 when nothing fits (or a given micro-batch does not).
    """
    from .finetune import plan_finetune

    names = ("dtype", "lora_targets", "optimizer", "loss", "loop", "sharding", "micro_batch",
             "target_tokens", "checkpointing", "lengths", "attn_impl", "allocator", "finetune",
             "lora_rank", "devices", "checkpoint_every")  # fmt: skip
    # what was given; plan_finetune's own defaults (one definition) for the rest
    given = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    try:
        result = plan_finetune(
            args.model, args.gpu_memory, args.seq_len, gpu=args.gpu,
            packing=args.packing or False, **given,
        )  # fmt: skip
    except ValueError as exc:
        parser.error(str(exc))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(result.to_table())
    return 0 if result.micro_batch and result.fits else 1
