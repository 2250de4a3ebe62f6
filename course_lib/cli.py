"""Command line: ``python -m course_lib plan ...`` prints a training plan as a table.

``plan`` plans the course's TinyGPT (``--d-model --n-layers --n-heads``) or a real Hugging Face
model (``--model NAME|config.json``: :func:`course_lib.finetune.plan_finetune`), for the memory
of one device (``--gpu-memory 24GiB``, the plans' ``memory_budget``, parsed by
:func:`course_lib.units.parse_bytes`; or ``--gpu NAME``, a shipped card). ``--json`` prints the
``--model`` plan as one JSON object. Subcommands live in ``COMMANDS``; another one is one more
entry there. Bad values end in a one-line ``error: ...`` and exit status 2, never a traceback; a
model that does not fit at all exits with status 1 (TinyGPT: a one-line error; ``--model``: the
plan, with the warning). Abbreviated flags are refused (``--gpu`` is not ``--gpu-memory``).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from .cli_model import add_model_arguments, card_budget, hf_only, run_model_plan
from .units import DTYPE_ALIASES, DTYPE_BYTES, GIB, dtype_name, parse_bytes

PLAN_EXAMPLE = """\
examples:
  python -m course_lib plan --d-model 768 --n-layers 12 --n-heads 12 --vocab-size 32000 \\
      --seq-len 2048 --gpu-memory 24GiB --dataset-size 800
  python -m course_lib plan --model Llama-3.1-8B --gpu "RTX 4090" --seq-len 4096 \\
      --dtype bf16 --finetune lora --lora-rank 16 --loss chunked --target-tokens 32000
  python -m course_lib plan --model Qwen2.5-7B --gpu T4 --seq-len 1024 --finetune qlora \\
      --lora-targets all-linear --json

TinyGPT: full fine-tuning with AdamW, per device: weights + gradients + two fp32 moments per
parameter + the activation peak of one forward/backward at micro-batch x seq-len full rows
(course_lib.memory.activation_bytes). Tokens per step count full rows.

--model: a shipped config (Llama-3.1-8B, Llama-3.2-1B, Qwen2.5-7B, Qwen2.5-0.5B,
Mistral-7B-v0.3, gpt2) or your config.json. Each micro-batch tried is a prediction of the whole
step on the device (course_lib.hf.memory.predict_hf_memory): weights, adapters, gradients,
optimiser state and step, activations, logits, transients, plus the allocator's reserve and
the CUDA context; the plan never goes above the card's memory. Defaults it assumes are printed
(LoRA targets: PEFT's for the family; loop: the Trainer's).
"""
TINYGPT_ONLY = ("d_model", "n_layers", "n_heads", "vocab_size",
                "target_min", "target_max", "min_tokens")  # fmt: skip
HF_ONLY = hf_only()
POSITIVE = ("lora_rank", "target_tokens", "checkpoint_every", "micro_batch", "devices",
            "sub_group_size", "dataset_size")  # fmt: skip
DTYPE_CHOICES = (*DTYPE_BYTES, *DTYPE_ALIASES)  # every spelling units.dtype_name reads
# --checkpointing: off, or on (every block: the library's "blocks", also accepted); TinyGPT
# also recomputes only its attention halves ("attention").
CHECKPOINTING_CHOICES = ("off", "on", "blocks", "attention")


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (``prog: error: ...``) and exit status 2, and a flag
    is never read from an abbreviation (``--gpu`` is not ``--gpu-memory``)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        """Exit with status 2 and ``message`` on one line."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def _memory(text: str) -> int:
    """``--gpu-memory``: an amount with a unit, one line of error otherwise."""
    try:
        return parse_bytes(text, "--gpu-memory")
    except ValueError as exc:
        # argparse already says "argument --gpu-memory:"; the message starts at the value
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--gpu-memory=")) from None


def _add_plan_arguments(p: argparse.ArgumentParser) -> None:
    model = p.add_argument_group("model: a TinyGPT shape, or --model")
    model.add_argument("--d-model", type=int, help="width of the residual stream")
    model.add_argument("--n-layers", type=int, help="number of transformer blocks")
    model.add_argument("--n-heads", type=int, help="attention heads (must divide --d-model)")
    model.add_argument(
        "--vocab-size", type=int, help="vocabulary size (default: 260, the byte-level tokenizer)"
    )
    model.add_argument(
        "--model",
        help="a Hugging Face model instead: a shipped name (Llama-3.1-8B, ...) or a config.json",
    )
    model.add_argument(
        "--attention",
        dest="attn_impl",
        choices=("eager", "sdpa", "flash"),
        help="eager materialises the (B, H, T, T) scores; sdpa and flash (FlashAttention-2, "
        "--model only) do not (default: eager for TinyGPT, sdpa for --model)",
    )
    # Deprecated: the old spelling of --attention.
    model.add_argument("--attn-impl", dest="old_attn_impl", choices=("eager", "sdpa", "flash"),
                       help=argparse.SUPPRESS)  # fmt: skip
    _add_run_arguments(p)
    tiny = p.add_argument_group("TinyGPT run")
    tiny.add_argument("--dataset-size", type=int,
                      help="training examples (with --model and packing: documents)")  # fmt: skip
    tiny.add_argument("--target-min", type=int, help="smallest effective batch (default: 16)")
    tiny.add_argument("--target-max", type=int, help="largest effective batch (default: 64)")
    tiny.add_argument("--min-tokens", type=int, help="tokens per step to reach (default: 4000)")
    add_model_arguments(p)


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    run = p.add_argument_group("training run")
    run.add_argument(
        "--seq-len", type=int, required=True, help="longest row in tokens: the worst case"
    )
    run.add_argument(
        "--gpu-memory",
        type=_memory,
        metavar="AMOUNT",
        help="memory per device, with a unit: 24GiB (binary, 2**30 bytes) or 80GB (decimal)",
    )
    run.add_argument("--gpu", metavar="NAME",
                     help="a shipped card instead of --gpu-memory: its memory as torch reports "
                          "it (T4, L4, A10G, 'RTX 4090', 'A100 40GB', 'A100 80GB', 'H100 80GB', "
                          "H200)")  # fmt: skip
    # Deprecated for one release: it meant GiB. --gpu-memory 24GiB says so.
    run.add_argument("--memory-gb", type=float, help=argparse.SUPPRESS)
    run.add_argument(
        "--dtype", choices=DTYPE_CHOICES, help="float32 (TinyGPT default) or bfloat16 (bf16)..."
    )
    run.add_argument(
        "--checkpointing",
        choices=CHECKPOINTING_CHOICES,
        metavar="{off,on}",
        help="on: recompute every block in the backward pass ('blocks' in the library and the "
        "JSON; TinyGPT also takes 'attention', its attention halves only); off (default: only "
        "when one row does not fit without it)",
    )
    run.add_argument("--devices", type=int, help="devices (default: 1)")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_plan_flags(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """One-line errors (exit 2) for values argparse cannot judge alone."""
    hf = args.model is not None
    stray = [n for n in (TINYGPT_ONLY if hf else HF_ONLY) if getattr(args, n) not in (None, False)]
    if stray or (args.json and not hf):
        name = stray[0] if stray else "json"
        other = "TinyGPT shape" if hf else "--model"
        parser.error(f"{_flag(name)} belongs to the {other} plan, not this one")
    _aliases(args, parser)
    needed = ["seq_len"] if hf else ["d_model", "n_layers", "n_heads", "seq_len", "dataset_size"]
    missing = [_flag(n) for n in needed if getattr(args, n) is None]
    if args.gpu_memory is None and args.gpu is None:
        missing.append("--gpu-memory (or --gpu)")
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    if args.gpu_memory is not None and args.gpu is not None:
        parser.error("give --gpu or --gpu-memory, not both")
    for name in (*needed, *TINYGPT_ONLY, *POSITIVE):
        value = getattr(args, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value <= 0:
            parser.error(f"{_flag(name)} must be positive, got {value}")
    low, high = args.target_min or 16, args.target_max or 64
    if low > high:
        parser.error(f"--target-min {low} is above --target-max {high}")
    if (args.packing is None) != (args.lengths is None):
        parser.error("--packing and --lengths go together")
    if args.checkpointing == "on":
        args.checkpointing = "blocks"


def _aliases(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """The deprecated spellings (--memory-gb, --attn-impl): their value, and a warning."""
    if args.old_attn_impl is not None:
        if args.attn_impl is not None:
            parser.error("give --attention only (--attn-impl is its old, deprecated spelling)")
        print(f"{parser.prog}: warning: --attn-impl is deprecated: use --attention "
              f"{args.old_attn_impl}", file=sys.stderr)  # fmt: skip
        args.attn_impl = args.old_attn_impl
    if args.memory_gb is not None:
        if not 0 < args.memory_gb < float("inf"):  # also nan
            parser.error(f"--memory-gb must be a positive finite number, got {args.memory_gb}")
        if args.gpu_memory is not None:
            parser.error("give --gpu-memory only (--memory-gb is its old, deprecated spelling)")
        print(
            f"{parser.prog}: warning: --memory-gb is deprecated and goes in the next release: "
            f"use --gpu-memory {args.memory_gb:g}GiB",
            file=sys.stderr,
        )
        args.gpu_memory = int(args.memory_gb * GIB)


def _run_plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    _check_plan_flags(args, parser)
    return (run_model_plan if args.model is not None else _run_tinygpt_plan)(args, parser)


def _run_tinygpt_plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import torch  # imported here so that --help and argument errors stay fast

    from .fit import NoBatchFitsError
    from .model import TinyGPTConfig
    from .plan import plan

    dtype = dtype_name(args.dtype or "float32")
    if dtype == "float16":
        parser.error("--dtype float16 is not planned for TinyGPT: use float32 or bfloat16")
    if args.attn_impl == "flash":
        parser.error("--attention flash is for --model; TinyGPT runs eager or sdpa")
    budget = args.gpu_memory if args.gpu_memory is not None else card_budget(args, parser)
    try:
        config = TinyGPTConfig(
            vocab_size=args.vocab_size or 260,
            d_model=args.d_model,
            n_heads=args.n_heads,
            n_layers=args.n_layers,
            max_seq_len=args.seq_len,
            attn_impl=args.attn_impl or "eager",
        )
        result = plan(
            config, budget, args.seq_len, args.dataset_size,
            target_effective=(args.target_min or 16, args.target_max or 64),
            min_tokens_per_step=args.min_tokens or 4000, n_devices=args.devices or 1,
            dtype=getattr(torch, dtype), checkpointing=args.checkpointing,
        )  # fmt: skip
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
    """The ``python -m course_lib`` parser.

    Returns:
        The parser, one subcommand per entry of ``COMMANDS`` (abbreviations off).
    """
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
    """Run the command line.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 a plan, 1 nothing fits, 2 (through ``SystemExit``) a bad argument.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.run(args, args.parser)
