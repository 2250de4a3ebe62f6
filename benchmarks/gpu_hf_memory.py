"""The Hugging Face planner on a CUDA device (``make bench-gpu``): allocated and reserved beside
``predict_hf_memory``'s ``peak_bytes`` and ``device_bytes``.

    python benchmarks/gpu_hf_memory.py            # every family and setting, tiny and small
    python benchmarks/gpu_hf_memory.py --quick    # tiny models, one shape each
    python benchmarks/gpu_hf_memory.py --families llama,qwen3

The grid the CPU checks cover (``tests/library/test_hf_memory.py``): every supported family's
tiny random copy (``course_lib.hf.tiny``) and a small one (hidden size x4, two more layers),
fp16 and bf16 (bf16 only where the card has it), eager, sdpa and FlashAttention-2 (when
``flash_attn`` is installed), full and LoRA (PEFT, all linear layers), with and without
checkpointing, the plain loop; no download. Each row is one steady training step: a warm-up step
makes AdamW's states (foreach, CUDA's default), then ``reset_peak_memory_stats``, ``zero_grad``,
forward, backward and ``optimizer.step()``; ``max_memory_allocated`` is compared with
``peak_bytes`` and ``max_memory_reserved`` plus the CUDA context (``mem_get_info``) with
``device_bytes``. Without CUDA it prints one line and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import sys
import time

MIB = 2**20


def card_for(major: int) -> str:
    """A shipped card of the device's compute-capability generation: it picks cuBLAS's
    workspace size (course_lib.hf.cards); the CUDA context is measured here, not taken."""
    return {7: "T4", 8: "A100 80GB", 9: "H100 80GB"}.get(major, "A100 80GB")


def step_once(model, opt, batch, loop: str) -> None:
    opt.zero_grad(set_to_none=True)
    if loop == "plain":
        out = model(**batch)
        out.loss.backward()
        opt.step()
        del out
    else:
        model(**batch).loss.backward()
        opt.step()


def measure_row(config, dtype, attn, lora, ckpt, shape, loop, card):
    import torch

    from course_lib.hf.memory import predict_hf_memory
    from course_lib.memory.hf_check import build_model

    kw = {"lora_targets": "all-linear"} if lora else {}
    model = build_model(config, dtype=dtype, attn_impl=attn, lora_rank=lora, checkpointing=ckpt,
                        **kw).to("cuda")  # fmt: skip
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-5)
    batch_size, seq_len = shape
    ids = torch.randint(config.vocab_size, shape, device="cuda")
    batch = {"input_ids": ids, "labels": ids.clone(), "use_cache": False}
    step_once(model, opt, batch, loop)  # AdamW's states
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step_once(model, opt, batch, loop)
    torch.cuda.synchronize()
    allocated = torch.cuda.max_memory_allocated()
    reserved = torch.cuda.max_memory_reserved()
    free, total = torch.cuda.mem_get_info()
    context = total - free - torch.cuda.memory_reserved()
    p = predict_hf_memory(config, batch_size, seq_len, lora_rank=lora, dtype=dtype,
                          attn_impl=attn, checkpointing=ckpt, loop=loop, device="cuda",
                          card=card, **kw)  # fmt: skip
    del model, opt, batch, ids, params
    torch.cuda.empty_cache()
    return allocated, reserved + context, p


def configs(families, quick: bool):
    from course_lib.hf.tiny import TINY
    from course_lib.memory.hf_check import tiny_hf_config

    for family in families:
        yield family, "tiny", tiny_hf_config(family)
        if quick:
            continue
        small = dict(TINY[family])
        for key in ("hidden_size", "intermediate_size", "n_embd"):
            if key in small:
                small[key] *= 4
        for key in ("num_hidden_layers", "n_layer"):
            if key in small:
                small[key] += 2
        if "layer_types" in small:  # Gemma 3: the pattern carried on
            small["layer_types"] = [small["layer_types"][i % len(small["layer_types"])]
                                    for i in range(small["num_hidden_layers"])]  # fmt: skip
        if "head_dim" in small:
            small["head_dim"] *= 4
        yield family, "small", tiny_hf_config(family, **small)


def dry_run(args) -> int:
    """The grid and its predictions, without a GPU (to check the script and see the rows)."""
    from course_lib.hf.arch import SUPPORTED_MODEL_TYPES
    from course_lib.hf.memory import predict_hf_memory

    families = args.families.split(",") if args.families else list(SUPPORTED_MODEL_TYPES)
    rows = refused = 0
    for (_, _, config), dtype, attn, (lora, ckpt), shape in itertools.product(
        configs(families, args.quick),
        ("fp16", "bf16"),
        ("eager", "sdpa", "flash"),
        [(None, "off"), (8, "blocks"), (8, "off")],
        [(2, 256), (1, 1024)],
    ):
        kw = {"lora_targets": "all-linear"} if lora else {}
        try:
            predict_hf_memory(config, *shape, lora_rank=lora, dtype=dtype, attn_impl=attn,
                              checkpointing=ckpt, loop="plain", **kw)  # fmt: skip
            rows += 1
        except ValueError:
            refused += 1
    print(f"{rows} rows predicted, {refused} refused (said, not measured)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny models, one shape")
    parser.add_argument("--families", default="")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: list the grid and the predictions only")  # fmt: skip
    args = parser.parse_args(argv)
    import torch

    if args.dry_run:
        return dry_run(args)
    if not torch.cuda.is_available():
        print("no CUDA device here: the GPU check of the Hugging Face planner needs one (skipped)")
        return 0
    missing = [m for m in ("transformers", "peft") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"{', '.join(missing)} not installed: pip install -e '.[hf]' (skipped)")
        return 0
    import transformers

    from course_lib.hf.arch import SUPPORTED_MODEL_TYPES

    families = args.families.split(",") if args.families else list(SUPPORTED_MODEL_TYPES)
    major, minor = torch.cuda.get_device_capability()
    card = card_for(major)
    dtypes = [torch.float16] + ([torch.bfloat16] if torch.cuda.is_bf16_supported() else [])
    attns = ["eager", "sdpa"] + (["flash_attention_2"]
                                 if importlib.util.find_spec("flash_attn") else [])  # fmt: skip
    shapes = [(2, 256)] if args.quick else [(2, 256), (1, 1024)]
    print(f"{torch.cuda.get_device_name()} (sm_{major}{minor}), torch {torch.__version__}, "
          f"transformers {transformers.__version__}; workspaces as for {card}\n")  # fmt: skip
    print(f"{'family':<12} {'size':<5} {'setting':<36} {'shape':>8} {'alloc MiB':>10} "
          f"{'pred':>8} {'ratio':>6} {'device MiB':>10} {'pred':>8} {'ratio':>6}")  # fmt: skip
    worst: dict[str, float] = {}
    start = time.perf_counter()
    for (family, size, config), dtype, attn, (lora, ckpt), shape in itertools.product(
        configs(families, args.quick),
        dtypes,
        attns,
        [(None, "off"), (8, "blocks"), (8, "off")],
        shapes,
    ):
        label = f"{str(dtype)[6:]} {attn[:5]} {'LoRA' if lora else 'full'} ckpt={ckpt} plain"
        try:
            alloc, device, p = measure_row(config, dtype, attn, lora, ckpt, shape, "plain", card)
        except (ValueError, RuntimeError, ImportError) as refused:  # e.g. Gemma 2 with sdpa
            print(f"{family:<12} {size:<5} {label:<36} refused or failed: {str(refused)[:60]}")
            continue
        r1, r2 = p.peak_bytes / alloc, p.device_bytes / device
        worst[family] = max(worst.get(family, 0.0), abs(r1 - 1))
        print(f"{family:<12} {size:<5} {label:<36} {f'{shape[0]}x{shape[1]}':>8} "
              f"{alloc / MIB:>10.1f} {p.peak_bytes / MIB:>8.1f} {r1:>6.3f} "
              f"{device / MIB:>10.1f} {p.device_bytes / MIB:>8.1f} {r2:>6.3f}")  # fmt: skip
    print("\nworst |allocated error| per family:")
    for family, err in worst.items():
        print(f"  {family:<12} {err:.2%}")
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
