"""What tests/notebooks/test_assessment.py tries against lesson 03's autograded items.

Wrong answers and wrong methods are listed by name; the right answer's other forms and the
shortcuts are built by the pass from the registration, the solution and the library call. Every
library call below is a *right* answer reached with ``course_lib``: it must score 0 on its method
(``own_work`` for a value, the function sandbox for a loop), never on its value.
"""

from assessment import Item


def _weights(accum: str, full: str, ratio: str) -> str:
    return f"weight_A_accum = {accum}\nweight_A_full = {full}\ntoken_ratio = {ratio}\n"


def _accumulate(body: str) -> str:
    return "import torch\n\ndef accumulate_token_weighted(model, window):\n" + body


def _train(body: str) -> str:
    return "import torch\n\ndef fixed_train(model, optimizer, loader, accum):\n" + body


def _q2(factors: str, same: str = "False") -> str:
    return f"q2_factors = {factors}\nq2_same_as_big_batch = {same}\n"


_COUNTS = "    counts = [int((mb['labels'][..., 1:] != -100).sum()) for mb in window]\n"
_STEP = (
    "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
    "        optimizer.step()\n"
    "        optimizer.zero_grad(set_to_none=True)\n"
)


def _per_window(weighting: str, *, count: str = "[..., 1:]", clip: bool = True, every: str = "accum",
                zero: bool = True) -> str:  # fmt: skip
    """A fixed_train that collects windows of ``every`` micro-batches and back-propagates each
    micro-batch by ``weighting`` (an expression in ``mb`` and ``total``)."""
    step = _STEP if clip else _STEP.split("\n", 1)[1]
    step = step if zero else step.rsplit("        optimizer.zero_grad", 1)[0]
    return _train(
        "    steps = 0\n"
        f"    for s in range(0, len(loader) - {every} + 1, {every}):\n"
        f"        window = loader[s:s + {every}]\n"
        f"        total = sum(int((mb['labels']{count} != -100).sum()) for mb in window)\n"
        "        for mb in window:\n"
        f"            ({weighting}).backward()\n" + step + "        steps += 1\n    return steps\n"
    )


_TOKEN_WEIGHTED = "model(**mb, num_items_in_batch=total).loss"

ITEMS: dict[str, Item] = {
    "predict-weights": Item(
        wrong={  # outside the rules (shares above 0 and at most 1, a ratio above 0): 0
            "shares as percentages": _weights("50", "10", "9"),
            "A left out of the step (a share of 0)": _weights("0", "0.1", "9"),
            "the ratio as a difference of shares, below 0": _weights("0.5", "0.1", "0.1 - 0.5"),
        },
        plausible={  # wrong, but within the rules: the completion point, as the right ones earn
            "the two shares swapped": _weights("0.1", "0.5", "9"),
            "the ratio inverted (one of B's tokens against one of A's)": _weights(
                "0.5", "0.1", "1 / 9"
            ),
            "every token counted alike under loss / accum": _weights("0.5", "0.1", "1"),
            "a token's weight 1 / (K n_A) taken for A's share": _weights("1 / 20", "0.1", "9"),
            "A's share of the tokens under both recipes": _weights("0.1", "0.1", "9"),
            "close, but not exact (told right at 3 figures before)": _weights("0.5004", "0.1", "9"),
        },
        shown={
            "passes 10%": "the explorer's question (a gradient error of a tenth), not a weight",
            "more than 10% off": "the DDP test's bound on the recipe's error, not a weight",
        },
        library=(
            "import torch\n"
            "from course_lib.batch import count_loss_tokens\n"
            "n_a = count_loss_tokens(torch.tensor([[-100] + [5] * 10]))\n"
            "n_b = count_loss_tokens(torch.tensor([[-100] + [5] * 90]))\n"
            "weight_A_accum = 1 / effective_batch_size(1, 2, 1)\n"
            "weight_A_full = n_a / (n_a + n_b)\n"
            "token_ratio = n_b / n_a"
        ),
    ),
    "accumulate-tokens": Item(
        wrong={
            "the mean of means (loss / len(window))": _accumulate(
                _COUNTS + "    for mb in window:\n"
                "        (model(**mb).loss / len(window)).backward()\n    return sum(counts)\n"
            ),
            "the micro-batch means summed (no / K)": _accumulate(
                _COUNTS + "    for mb, n in zip(window, counts):\n        if n:\n"
                "            model(**mb).loss.backward()\n    return sum(counts)\n"
            ),
            "the summed loss over tokens (no / N)": _accumulate(
                _COUNTS + "    if not sum(counts):\n        raise ValueError('no loss token')\n"
                "    for mb in window:\n"
                "        model(**mb, num_items_in_batch=1).loss.backward()\n    return sum(counts)\n"
            ),
            "the unshifted labels counted (labels != -100)": _accumulate(
                "    counts = [int((mb['labels'] != -100).sum()) for mb in window]\n"
                "    if not sum(counts):\n        raise ValueError('no loss token')\n"
                "    for mb, n in zip(window, counts):\n        if n:\n"
                "            (model(**mb).loss * n / sum(counts)).backward()\n"
                "    return sum(counts)\n"
            ),
            "mean loss × n_i / N on every micro-batch, empty ones too": _accumulate(
                _COUNTS + "    if not sum(counts):\n        raise ValueError('no loss token')\n"
                "    for mb, n in zip(window, counts):\n"
                "        (model(**mb).loss * n / sum(counts)).backward()\n    return sum(counts)\n"
            ),
            "no ValueError on a window without loss tokens": _accumulate(
                _COUNTS + "    for mb, n in zip(window, counts):\n        if n:\n"
                "            model(**mb, num_items_in_batch=sum(counts)).loss.backward()\n"
                "    return sum(counts)\n"
            ),
        },
        library=(
            "from course_lib.accumulation import accumulate_gradients\n\n"
            "def accumulate_token_weighted(model, window):\n"
            "    return accumulate_gradients(model, window, 'token_weighted').window_loss_tokens"
        ),
    ),
    "fix-recipe-loop": Item(
        wrong={
            "the recipe's loop unchanged (loss / accum)": _train(
                "    steps = 0\n    for step, micro_batch in enumerate(loader):\n"
                "        (model(**micro_batch).loss / accum).backward()\n"
                "        if (step + 1) % accum == 0:\n"
                + _STEP.replace("        ", "            ")
                + "            steps += 1\n    return steps\n"
            ),
            "a step on every micro-batch": _train(
                "    for micro_batch in loader:\n        model(**micro_batch).loss.backward()\n"
                + _STEP.replace("        ", "        ")
                + "    return len(loader)\n"
            ),
            "the unshifted labels counted": _per_window(_TOKEN_WEIGHTED, count=""),
            "the summed loss (no / N), left to the clipping": _per_window(
                "model(**mb, num_items_in_batch=1).loss"
            ),
            "no clipping": _per_window(_TOKEN_WEIGHTED, clip=False),
            "windows of 4 micro-batches, whatever accum says": _per_window(
                _TOKEN_WEIGHTED, every="4"
            ),
            "no zero_grad after a step": _per_window(_TOKEN_WEIGHTED, zero=False),
            "mean loss × n_i / N on every micro-batch, empty ones too": _per_window(
                "model(**mb).loss * int((mb['labels'][..., 1:] != -100).sum()) / total"
            ),
            "the right steps, but nothing returned": _per_window(_TOKEN_WEIGHTED).replace(
                "    return steps\n", "    return None\n"
            ),
        },
        library=(
            "import torch\n"
            "from course_lib.accumulation import accumulate_gradients\n\n"
            "def fixed_train(model, optimizer, loader, accum):\n"
            "    for s in range(0, len(loader) - accum + 1, accum):\n"
            "        accumulate_gradients(model, loader[s:s + accum], 'token_weighted')\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
            "        optimizer.step()\n"
            "        optimizer.zero_grad(set_to_none=True)\n"
            "    return len(loader) // accum"
        ),
    ),
    "noise-target": Item(
        # rho_example / (2 × 0.04) = 22.27 here: the next whole number is 23, rounding and cutting
        # down give 22, and every other method lands further away
        wrong={
            "rounded to the nearest whole number": (
                "target_accum_steps = round(rho_example / (micro_batch_size * noise_target))"
            ),
            "cut down (floor)": (
                "target_accum_steps = int(rho_example / (micro_batch_size * noise_target))"
            ),
            "the largest accumulation still above the target": (
                "target_accum_steps = math.ceil(rho_example / (micro_batch_size * noise_target)) - 1"
            ),
            "one more, to be safe": (
                "target_accum_steps = math.ceil(rho_example / (micro_batch_size * noise_target)) + 1"
            ),
            "the micro-batch's two examples forgotten": (
                "target_accum_steps = math.ceil(rho_example / noise_target)"
            ),
            "the ratio taken to fall as 1 / sqrt(K)": (
                "target_accum_steps = math.ceil((rho_example / noise_target) ** 2 / micro_batch_size)"
            ),
            "the long completions' one-example ratio instead of the whole pool's": (
                "target_accum_steps = math.ceil(noise.one_example_noise['long'] / "
                "noise.signal['long'] / (micro_batch_size * noise_target))"
            ),
        },
        library=(
            "target_accum_steps = next(k for k in range(1, 129) if rho_example / "
            "effective_batch_size(micro_batch_size, k, 1) <= noise_target)"
        ),
    ),
    "q2": Item(
        wrong={
            "memory grows with the effective batch": _q2("(8, 1, 8, 8, 1 / 8)"),
            "the same step as the big batch": _q2("(1, 1, 8, 8, 1 / 8)", "True"),
            "steps per epoch unchanged": _q2("(1, 1, 8, 8, 1)"),
            "steps per epoch multiplied, not divided": _q2("(1, 1, 8, 8, 8)"),
            "FLOPs per token grow with the accumulation": _q2("(1, 8, 8, 8, 1 / 8)"),
            "tokens per step unchanged": _q2("(1, 1, 8, 1, 1 / 8)"),
            "close, but not exact (told right at 3 figures before)": _q2("(1, 1, 8, 8, 0.1251)"),
        },
        library=(
            "from course_lib.budget import steps_per_epoch\n"
            "q2_factors = (1, 1, effective_batch_size(2, 8, 1) / effective_batch_size(2, 1, 1),\n"
            "              tokens_per_step(2, 512, 8, 1) / tokens_per_step(2, 512, 1, 1),\n"
            "              steps_per_epoch(1600, 16) / steps_per_epoch(1600, 2))\n"
            "q2_same_as_big_batch = False"
        ),
    ),
}
