"""Command line: ``python -m course_lib plan ...`` prints a training plan as a table.

Subcommands live in ``COMMANDS``; another one (``grade``, say) is one more entry there. Bad
values end in a one-line ``error: ...`` and exit status 2, never a traceback; a model that does
not fit at all ends in a one-line error and exit status 1.
"""

from __future__ import annotations

import argparse
import sys

PLAN_EXAMPLE = """\
example:
  python -m course_lib plan --d-model 768 --n-layers 12 --n-heads 12 --vocab-size 32000 \\
      --seq-len 2048 --memory-gb 24 --dataset-size 800

The memory model is full fine-tuning with AdamW, per device: weights + gradients + two fp32
moments per parameter + the activation peak of one forward/backward at micro-batch x seq-len
full rows (course_lib.memory.activation_bytes). Tokens per step count full rows.
"""


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (``prog: error: ...``) and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def _add_plan_arguments(p: argparse.ArgumentParser) -> None:
    model = p.add_argument_group("model (TinyGPT shape)")
    model.add_argument("--d-model", type=int, required=True, help="width of the residual stream")
    model.add_argument("--n-layers", type=int, required=True, help="number of transformer blocks")
    model.add_argument(
        "--n-heads", type=int, required=True, help="attention heads (must divide --d-model)"
    )
    model.add_argument(
        "--vocab-size",
        type=int,
        default=260,
        help="vocabulary size (default: 260, the course's byte-level tokenizer)",
    )
    model.add_argument(
        "--attn-impl",
        choices=("eager", "sdpa"),
        default="eager",
        help="eager materialises the (B, H, T, T) scores; sdpa does not (default: eager)",
    )
    run = p.add_argument_group("training run")
    run.add_argument(
        "--seq-len",
        type=int,
        required=True,
        help="longest row in tokens: the worst case the memory must survive",
    )
    run.add_argument(
        "--memory-gb", type=float, required=True, help="memory per device in GiB (2**30 bytes)"
    )
    run.add_argument("--dataset-size", type=int, required=True, help="training examples")
    run.add_argument("--devices", type=int, default=1, help="devices available (default: 1)")
    run.add_argument(
        "--target-min",
        type=int,
        default=16,
        help="smallest effective batch, in examples (default: 16)",
    )
    run.add_argument(
        "--target-max",
        type=int,
        default=64,
        help="largest effective batch, in examples (default: 64)",
    )
    run.add_argument(
        "--min-tokens",
        type=int,
        default=4000,
        help="tokens per optimiser step to reach (default: 4000)",
    )
    run.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default="float32",
        help="dtype of weights, gradients and activations (default: float32)",
    )


def _run_plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    for flag in (
        "d_model",
        "n_layers",
        "n_heads",
        "vocab_size",
        "seq_len",
        "dataset_size",
        "devices",
        "target_min",
        "target_max",
        "min_tokens",
    ):
        value = getattr(args, flag)
        if value <= 0:
            parser.error(f"--{flag.replace('_', '-')} must be positive, got {value}")
    if not 0 < args.memory_gb < float("inf"):  # also rejects nan
        parser.error(f"--memory-gb must be a positive finite number, got {args.memory_gb}")
    if args.target_min > args.target_max:
        parser.error(f"--target-min {args.target_min} is above --target-max {args.target_max}")

    import torch  # imported here so that --help and argument errors stay fast

    from .budget import NoBatchFitsError
    from .model import TinyGPTConfig
    from .plan import plan

    try:
        config = TinyGPTConfig(
            vocab_size=args.vocab_size,
            d_model=args.d_model,
            n_heads=args.n_heads,
            n_layers=args.n_layers,
            max_seq_len=args.seq_len,
            attn_impl=args.attn_impl,
        )
        result = plan(
            config,
            int(args.memory_gb * 2**30),
            args.seq_len,
            args.dataset_size,
            target_effective=(args.target_min, args.target_max),
            min_tokens_per_step=args.min_tokens,
            n_devices=args.devices,
            dtype=getattr(torch, args.dtype),
        )
    except ValueError as exc:
        parser.error(str(exc))
    except NoBatchFitsError as exc:
        print(f"{parser.prog}: error: nothing fits: {exc}", file=sys.stderr)
        return 1
    print(result.to_table())
    return 0


# name -> (add_arguments(parser), run(args, parser) -> exit status, one-line summary, epilog)
COMMANDS = {
    "plan": (
        _add_plan_arguments,
        _run_plan,
        "choose micro-batch, accumulation and devices for a memory budget",
        PLAN_EXAMPLE,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m course_lib", description="Shapes: the course's command-line tools."
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Parser
    )
    for name, (add_arguments, run, summary, epilog) in COMMANDS.items():
        p = sub.add_parser(
            name,
            help=summary,
            description=summary.capitalize() + ".",
            epilog=epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        add_arguments(p)
        p.set_defaults(run=run, parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.run(args, args.parser)
