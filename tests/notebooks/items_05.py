"""What tests/notebooks/test_assessment.py tries against lesson 05's autograded items."""

from assessment import Item

# Hand-written searches that are wrong in the ways students get them wrong.
_DOUBLING_FROM_GUESS = """
def largest_fitting(fits, guess):  # the library's strategy by hand: doubles even from a good guess
    lo, hi = 0, max(1, guess)
    while fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    if lo == 0:
        raise ValueError("nothing fits")
    return lo
"""

_LINEAR_FROM_GUESS = """
def largest_fitting(fits, guess):  # exact, but one size at a time
    n = max(1, guess)
    if fits(n):
        while fits(n + 1):
            n += 1
        return n
    while n > 1:
        n -= 1
        if fits(n):
            return n
    raise ValueError("nothing fits")
"""

_OFF_BY_ONE = """
def largest_fitting(fits, guess):  # returns the smallest failure, not the largest fit
    g = max(1, guess)
    lo, hi, step = (g, None, 1) if fits(g) else (None, g, 1)
    while hi is None:
        hi = g + step if not fits(g + step) else None
        lo, step = (g + step, 2 * step) if hi is None else (lo, step)
    while lo is None:
        n = max(1, g - step)
        lo, hi, step = (n, hi, step) if fits(n) else (None, n, 2 * step)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return hi
"""

ITEMS: dict[str, Item] = {
    "predict-micro-batch": Item(
        wrong=["predicted_micro_batch = 12", "predicted_micro_batch = 10"],
        library=(
            "predicted_micro_batch = find_max_batch_size("
            "lambda n: training_memory(config, n, seq_len).total <= memory_budget).batch_size"
        ),
        constants=["predicted_micro_batch"],
    ),
    "largest-fitting": Item(
        wrong=[_DOUBLING_FROM_GUESS, _LINEAR_FROM_GUESS, _OFF_BY_ONE],
        library=(
            "def largest_fitting(fits, guess):\n"
            "    return find_max_batch_size(fits, start=max(1, guess)).batch_size\n"
        ),
    ),
    "target-practice": Item(
        wrong=[
            "tp_dataset_size, tp_micro_batch, tp_grad_accum = 3750, 8, 17",
            "tp_dataset_size, tp_micro_batch, tp_grad_accum = 3250, 8, 17",
            "tp_dataset_size, tp_micro_batch, tp_grad_accum = 3500, 11, 13",
        ],
        library=(
            "tp_dataset_size = next(n for n in range(250, 10_001, 250) "
            "if (_t := small_dataset_trap("
            "n, loss_tokens_per_example, [1], min_tokens=min_tokens_per_step))"
            ".max_effective_for_steps >= math.ceil(_t.min_effective_for_tokens))\n"
            "_p = plan(config, memory_budget, seq_len, tp_dataset_size, "
            "target_effective=(136, 136))\n"
            "tp_micro_batch, tp_grad_accum = _p.micro_batch, _p.grad_accum_steps\n"
        ),
        constants=["tp_dataset_size"],
    ),
    "q1": Item(
        wrong=[
            "q1_effective, q1_tokens = 24, 24_576",  # forgot the second GPU
            "q1_effective, q1_tokens = 48, 98_304",
        ],
        library=(
            "q1_effective = effective_batch_size(4, 6, 2)\n"
            "q1_tokens = tokens_per_step(4, 1024, 6, 2)\n"
        ),
        constants=["q1_effective", "q1_tokens"],
    ),
    "q2": Item(
        wrong=[
            "q2_max_effective, q2_steps_at_64 = 59, 23",
            "q2_max_effective, q2_steps_at_64 = 60, 24",  # counted the last partial window
        ],
        library=(
            "q2_max_effective = next(e for e in range(1500, 0, -1) "
            "if steps_per_epoch(1500, e, drop_last=True) >= 25)\n"
            "q2_steps_at_64 = steps_per_epoch(1500, 64, drop_last=True)\n"
        ),
        constants=["q2_max_effective", "q2_steps_at_64"],
    ),
    "q3": Item(
        wrong=[
            'q3_accum, q3_changes = 17, {"b", "c", "d", "f"}',
            'q3_accum, q3_changes = 18, {"b", "c"}',
            'q3_accum, q3_changes = 18, {"a", "b", "c", "d", "f"}',
        ],
        library=(
            "q3_accum = next(a for a in range(1, 100) if tokens_per_step(1, 225, a) >= 4000)\n"
            'q3_changes = {"b", "c", "d", "f"}\n'
        ),
        constants=["q3_accum", "q3_changes"],
    ),
    "q5": Item(
        wrong=[
            "q5_rows_plain, q5_rows_ckpt = 3, 50",
            "q5_rows_plain, q5_rows_ckpt = 4, 51",  # rounded up: the last row does not fit
        ],
        library=(
            "_big = plan_finetune('Mistral-7B-v0.3', '80GiB', 2048, dtype='bfloat16', "
            "finetune='lora', lora_rank=16, attn_impl='sdpa')\n"
            "q5_rows_plain = _big.max_micro_batch_by_mode['off']\n"
            "q5_rows_ckpt = _big.max_micro_batch_by_mode['blocks']\n"
        ),
        constants=["q5_rows_plain", "q5_rows_ckpt"],
    ),
}
