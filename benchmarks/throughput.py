"""Training throughput of TinyGPT on the CPU: random padded vs length-grouped vs packed batches.

Same examples (one epoch each), same initial weights, same optimiser, same token budget per
step: padded batches hold ``round(budget / mean length)`` examples (about ``budget`` real tokens
on average), packed batches hold ``budget // capacity`` rows of ``capacity`` slots. Throughput is
real (non-pad) tokens per second of training step (forward + backward + AdamW step; batches are
collated beforehand and not timed). Padded batches are right-padded and run causal SDPA without
the padding mask (exact, see ``model_inputs``); packed batches run the per-document ``varlen``
loop, and, for comparison, SDPA with the block-diagonal document mask. The methods take their
steps in turn (``course_lib.timing.interleave``), so a burst of background load on a shared
machine hits all alike; one untimed warm-up step each comes first.
On a CPU shared with other jobs, ``--threads 1`` measures more steadily than 2 threads.

Also printed: the mean loss per label token at the initial weights (must agree across methods to
~1e-5: packing changes the shapes, not the maths) and the mean training loss per token over the
epoch (close, not equal: the batches and their order differ).

    python benchmarks/throughput.py [--n 240] [--budget 2048] [--capacity 512]
"""

from __future__ import annotations

import argparse
import copy

import torch

from course_lib.collate import (
    LengthGroupedSampler,
    PaddingCollator,
    example_tokens,
    padding_stats,
    random_batches,
)
from course_lib.data import PAD_ID, example_lengths, make_instruction_dataset
from course_lib.model import TinyGPT, TinyGPTConfig
from course_lib.packing import PackingCollator, pack_lengths
from course_lib.timing import interleave


def build_batches(examples, budget: int, capacity: int, seed: int) -> dict[str, tuple[str, list]]:
    """Method name -> (attention implementation, list of batches), all over the same examples."""
    lengths = example_lengths(examples)
    batch_size = max(1, round(budget / lengths.mean()))
    rows_per_step = max(1, budget // capacity)
    pad = PaddingCollator(PAD_ID)
    pack = PackingCollator(capacity, PAD_ID)
    random_idx = random_batches(len(examples), batch_size, seed=seed)
    grouped_idx = LengthGroupedSampler(lengths, batch_size, seed=seed).batches()
    rows = pack_lengths(lengths, capacity)
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(seed)).tolist()
    rows = [rows[i] for i in order]
    packed = []
    for s in range(0, len(rows), rows_per_step):
        step_rows = rows[s : s + rows_per_step]
        members = sorted({i for row in step_rows for i in row})
        local = {i: k for k, i in enumerate(members)}
        pairs = [example_tokens(examples[i], i, completion_only=True) for i in members]
        packed.append(pack.collate_rows(pairs, [[local[i] for i in row] for row in step_rows]))
    padded = lambda idx: [pad([examples[i] for i in b]) for b in idx]  # noqa: E731
    return {
        "random padded": ("sdpa", padded(random_idx)),
        "length-grouped": ("sdpa", padded(grouped_idx)),
        "packed (varlen)": ("varlen", packed),
        "packed (sdpa mask)": ("sdpa", packed),
    }


def real_tokens(batch) -> int:
    return padding_stats([batch]).real_tokens


def model_inputs(batch) -> dict:
    """The batch without ``attention_mask``. Exact for right padding under causal attention: a
    real token only attends to earlier slots, which are all real, so the mask changes no real
    token's logits or loss; without it SDPA takes its causal path instead of a dense
    ``(B, 1, T, T)`` float mask. Each method gets its fastest exact path."""
    return {k: v for k, v in batch.items() if k != "attention_mask"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=240, help="examples (one epoch)")
    parser.add_argument("--budget", type=int, default=2048, help="token slots per step")
    parser.add_argument("--capacity", type=int, default=512, help="packed row length")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    examples = make_instruction_dataset(args.n, seed=args.seed, max_len=args.capacity)
    methods = build_batches(examples, args.budget, args.capacity, args.seed)
    config = TinyGPTConfig(
        d_model=args.d_model, n_heads=4, n_layers=2, max_seq_len=args.capacity, attn_impl="sdpa"
    )
    base = TinyGPT(config)

    print(
        f"{args.n} examples, {int(example_lengths(examples).sum()):,} tokens, budget "
        f"{args.budget} slots/step, capacity {args.capacity}, d_model {args.d_model}, "
        f"{torch.get_num_threads()} threads"
    )
    init_loss = {}
    runs = {}
    for name, (impl, batches) in methods.items():
        model = copy.deepcopy(base)
        model.set_attn_impl(impl)
        with torch.no_grad():  # loss per token at the initial weights: must agree across methods
            s = n = 0
            for b in batches:
                out = model(**model_inputs(b))
                s += out.loss.item() * out.n_loss_tokens
                n += out.n_loss_tokens
            init_loss[name] = s / n
        runs[name] = {
            "model": model,
            "opt": torch.optim.AdamW(model.parameters(), lr=1e-3),
            "batches": batches,
            "slots": sum(b["input_ids"].numel() for b in batches),
        }

    def train_step(r):
        def step(i: int):  # i < 0: the untimed warm-up, on the epoch's last batch
            batch = r["batches"][i]
            out = r["model"](**model_inputs(batch))
            out.loss.backward()
            r["opt"].step()
            r["opt"].zero_grad(set_to_none=True)
            return real_tokens(batch), out.loss.item() * out.n_loss_tokens, out.n_loss_tokens

        return step

    timings = interleave(
        {name: train_step(r) for name, r in runs.items()},
        {name: len(r["batches"]) for name, r in runs.items()},
        warmup=1,
        progress=True,
        desc="round-robin steps",
    )
    for name, r in runs.items():
        done = timings.results[name]
        r["time"] = timings.total(name)
        r["tokens"] = sum(t for t, _, _ in done)
        r["loss_sum"] = sum(loss for _, loss, _ in done)
        r["loss_tokens"] = sum(n for _, _, n in done)

    ref = runs["random padded"]["tokens"] / runs["random padded"]["time"]
    grouped = runs["length-grouped"]["tokens"] / runs["length-grouped"]["time"]
    print(
        f"\n{'method':<20}{'steps':>6}{'slots':>9}{'fill':>7}{'time s':>8}{'real tok/s':>12}"
        f"{'vs random':>10}{'vs grouped':>11}{'init loss/tok':>15}{'train loss/tok':>16}"
    )
    for name, r in runs.items():
        rate = r["tokens"] / r["time"]
        print(
            f"{name:<20}{len(r['batches']):>6}{r['slots']:>9,}{r['tokens'] / r['slots']:>7.1%}"
            f"{r['time']:>8.2f}{rate:>12,.0f}{rate / ref:>10.2f}{rate / grouped:>11.2f}"
            f"{init_loss[name]:>15.6f}{r['loss_sum'] / r['loss_tokens']:>16.4f}"
        )
    spread = max(init_loss.values()) - min(init_loss.values())
    print(f"\ninit loss/token spread across methods: {spread:.2e} (same tokens, same labels)")


if __name__ == "__main__":
    main()
