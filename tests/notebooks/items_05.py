"""What tests/notebooks/test_assessment.py tries against lesson 05's autograded items.

Wrong answers and wrong methods are listed by name; the right answer's other forms and the
shortcuts are built by the pass from the registration, the solution and the library call.
Question 5's wrong methods each leave out (or mis-state) one thing between the tensors and what
the card shows; the question is posed so that every one of them gives another answer.
"""

from assessment import Item


def _predict(body: str) -> str:
    return f"def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):\n    {body}\n"


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

_VISIBLE_TABLE = """
def largest_fitting(fits, guess):  # the visible test's six cards by their guess, no search
    return {37: 37, 36: 37, 38: 37, 5: 37, 200: 37, 3: 1000}.get(guess, guess)
"""

_OFF_BY_ONE = """
def largest_fitting(fits, guess):  # the right search, but it returns the smallest failure
    g = max(1, int(guess))
    if fits(g):
        lo, hi, step = g, None, 1
        while hi is None:
            if fits(g + step):
                lo, step = g + step, 2 * step
            else:
                hi = g + step
    else:
        if g == 1:
            raise ValueError("even a batch of 1 does not fit")
        lo, hi, step = None, g, 1
        while lo is None:
            n = max(1, g - step)
            if fits(n):
                lo = n
            elif n == 1:
                raise ValueError("even a batch of 1 does not fit")
            else:
                hi, step = n, 2 * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return hi
"""


_Q5 = """
_per_row = two_rows_qlora - one_row_qlora
def _shows(allocated, fixed):
    return {shows}
q5_rows_qlora = 0
while _shows(one_row_qlora + q5_rows_qlora * _per_row, fixed_qlora) <= {card}:
    q5_rows_qlora += 1
_peak = one_row_qlora + (q5_rows_qlora - 1) * _per_row
q5_spare_gib_qlora = ({card} - _shows(_peak, fixed_qlora)) / {unit}
q5_full_fits = _shows(one_row_full, fixed_full) <= {card_full}
"""


def _q5(shows="fixed + int(reserve * (allocated - fixed)) + context_bytes", card="card_qlora",
        card_full="card_full", unit="2**30") -> str:  # fmt: skip
    return _Q5.format(shows=shows, card=card, card_full=card_full, unit=unit)


_Q5_ONE_ROW_PEAKS = """
def _shows(allocated, fixed):
    return fixed + int(reserve * (allocated - fixed)) + context_bytes
q5_rows_qlora = 0
while _shows((q5_rows_qlora + 1) * one_row_qlora, fixed_qlora) <= card_qlora:  # n one-row peaks
    q5_rows_qlora += 1
q5_spare_gib_qlora = (card_qlora - _shows(q5_rows_qlora * one_row_qlora, fixed_qlora)) / 2**30
q5_full_fits = _shows(one_row_full, fixed_full) <= card_full
"""

_Q5_ROUNDED_UP = """
import math
_per_row = two_rows_qlora - one_row_qlora
_room = fixed_qlora + (card_qlora - context_bytes - fixed_qlora) / reserve
q5_rows_qlora = math.ceil((_room - one_row_qlora) / _per_row) + 1
_peak = one_row_qlora + (q5_rows_qlora - 1) * _per_row
_shown = fixed_qlora + int(reserve * (_peak - fixed_qlora)) + context_bytes
q5_spare_gib_qlora = (card_qlora - _shown) / 2**30
q5_full_fits = fixed_full + int(reserve * (one_row_full - fixed_full)) + context_bytes <= card_full
"""

ITEMS: dict[str, Item] = {
    "predict-micro-batch": Item(
        grader="_rows_that_fit",
        wrong={
            "ignores the fixed part": _predict("return memory_budget // row_bytes"),
            "float division (exact only below 2**53)": _predict(
                "return max(0, int((memory_budget - fixed_bytes) / row_bytes))"
            ),
            "rounds to the nearest row": _predict(
                "return max(0, round((memory_budget - fixed_bytes) / row_bytes))"
            ),
            "a negative count when the fixed part alone is over": _predict(
                "return (memory_budget - fixed_bytes) // row_bytes"
            ),
            "one row more than fits (rounds up)": _predict(
                "return max(0, -(-(memory_budget - fixed_bytes) // row_bytes))"
            ),
            "a table of the visible cards": _predict(
                "return {1_000_003: 998, 7_777_777: 7796, 5_000: 0}.get(memory_budget, 11)"
            ),
        },
        library=(
            "def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):\n"
            "    return find_max_batch_size(\n"
            "        lambda n: fixed_bytes + n * row_bytes <= memory_budget).batch_size\n"
        ),
    ),
    "largest-fitting": Item(
        wrong={
            "doubles away from the guess (the library's strategy)": _DOUBLING_FROM_GUESS,
            "one size at a time from the guess": _LINEAR_FROM_GUESS,
            "returns the smallest failure": _OFF_BY_ONE,
            "a table of the visible cards": _VISIBLE_TABLE,
        },
        library=(
            "def largest_fitting(fits, guess):\n"
            "    return find_max_batch_size(fits, start=max(1, guess)).batch_size\n"
        ),
    ),
    "target-practice": Item(
        wrong={
            "a dataset where both hold, not the smallest": (
                "tp_dataset_size, tp_micro_batch, tp_grad_accum = 3750, 8, 17"
            ),
            "too small a dataset for 25 steps": (
                "tp_dataset_size, tp_micro_batch, tp_grad_accum = 3250, 8, 17"
            ),
            "an effective batch that leaves 24 steps": (
                "tp_dataset_size, tp_micro_batch, tp_grad_accum = 3500, 11, 13"
            ),
        },
        shown={
            "accumulation for >= 4,000 loss tokens: 17": (
                "section 4's accumulation at the plan's micro-batch: one of many shapes that meet "
                "both targets; the item's point is the smallest dataset where they can"
            ),
            "19, 17, 15": "the sizes accelerate's shrink-by-10 % search tries from 128",
        },
        library=(
            "tp_dataset_size = next(n for n in range(250, 10_001, 250) "
            "if (_t := small_dataset_trap("
            "n, loss_tokens_per_example, [1], min_tokens=min_tokens_per_step))"
            ".max_effective_for_steps >= math.ceil(_t.min_effective_for_tokens))\n"
            "_p = plan(config, memory_budget, seq_len, tp_dataset_size, "
            "target_effective=(136, 136))\n"
            "tp_micro_batch, tp_grad_accum = _p.micro_batch, _p.grad_accum_steps\n"
        ),
    ),
    "q1": Item(
        wrong={
            "forgets the second GPU": "q1_effective, q1_tokens = 24, 24_576",
            "tokens of two GPUs counted twice": "q1_effective, q1_tokens = 48, 98_304",
            "one GPU's tokens": "q1_effective, q1_tokens = 48, 24_576",
        },
        library=(
            "q1_effective = effective_batch_size(4, 6, 2)\n"
            "q1_tokens = tokens_per_step(4, 1024, 6, 2)\n"
        ),
    ),
    "q2": Item(
        wrong={
            "one less than the largest": "q2_max_effective, q2_steps_at_64 = 59, 23",
            "counts the last partial window": "q2_max_effective, q2_steps_at_64 = 60, 24",
            "one more than the largest": "q2_max_effective, q2_steps_at_64 = 61, 23",
        },
        library=(
            "q2_max_effective = next(e for e in range(1500, 0, -1) "
            "if steps_per_epoch(1500, e, drop_last=True) >= 25)\n"
            "q2_steps_at_64 = steps_per_epoch(1500, 64, drop_last=True)\n"
        ),
    ),
    "q3": Item(
        wrong={
            "one accumulation step short": 'q3_accum, q3_changes = 17, {"b", "c", "d", "f"}',
            "forgets the wall time and the gradient": 'q3_accum, q3_changes = 18, {"b", "c"}',
            "thinks accumulation costs memory": (
                'q3_accum, q3_changes = 18, {"a", "b", "c", "d", "f"}'
            ),
            "thinks an epoch costs more compute": (
                'q3_accum, q3_changes = 18, ["b", "c", "d", "e", "f"]'
            ),
        },
        library=(
            "q3_accum = next(a for a in range(1, 100) if tokens_per_step(1, 225, a) >= 4000)\n"
            'q3_changes = {"b", "c", "d", "f"}\n'
        ),
    ),
    "q5": Item(
        wrong={
            "the tensors only (no reserve, no CUDA context)": _q5(shows="allocated"),
            "the reserve but no CUDA context": _q5(
                shows="fixed + int(reserve * (allocated - fixed))"
            ),
            "the reserve over the weights too": _q5(
                shows="int(reserve * allocated) + context_bytes"
            ),
            "the CUDA context but no reserve": _q5(shows="allocated + context_bytes"),
            "decimal GB cards (24e9, 80e9 bytes)": _q5(card="24 * 10**9", card_full="80 * 10**9"),
            "the spare in GB, not GiB": _q5(unit="10**9"),
            "n rows as n times the one-row peak": _Q5_ONE_ROW_PEAKS,
            "the micro-batch rounded up": _Q5_ROUNDED_UP,
        },
        library=(
            "from course_lib.lessons.choosing import card_plan as _cp\n"
            '_a = _cp("Llama-3.1-8B", "RTX 4090", "qlora")\n'
            '_b = _cp("Llama-3.1-8B", "A100 80GB", "full")\n'
            "q5_rows_qlora = _a.max_micro_batch\n"
            "q5_spare_gib_qlora = (_a.card_bytes - _a.device[q5_rows_qlora]) / 2**30\n"
            "q5_full_fits = _b.max_micro_batch >= 1\n"
        ),
    ),
}
