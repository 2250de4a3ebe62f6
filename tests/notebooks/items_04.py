"""What tests/notebooks/test_assessment.py tries against lesson 04's autograded items.

Wrong answers and wrong methods are listed by name; the right answer's other forms and the
shortcuts are built by the pass from the registration, the solution and the library call. Each
library call gives the *right* value (or function) by way of ``course_lib``: it must score 0
because the item is the student's own work, not because the value is wrong.
"""

from assessment import Item


def _stride_model(body: str) -> str:
    return (
        "def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):\n"
        "    full = 10 * d_model + 2 * d_mlp + n_heads + 4\n"
        "    if checkpoint_every == 0:\n"
        "        return n_layers * full\n"
        f"{body}"
    )


# Forgets that the blocks above a rebuilt block are already freed (adds S to everything kept).
_NO_WALK = _stride_model(
    "    c = -(-n_layers // checkpoint_every)\n"
    "    return c * d_model + (n_layers - c) * full + full\n"
)
# Counts the checkpointed blocks with floor division.
_FLOOR = _stride_model(
    "    c = max(1, n_layers // checkpoint_every)\n"
    "    return max(c * d_model + (n_layers - c) * full, (c - 1) * d_model + full + d_model)\n"
)
# Checkpoints blocks k-1, 2k-1, ... (counted from 1) instead of 0, k, 2k, ...
_FROM_ONE = _stride_model(
    "    kept = [d_model if (i + 1) % checkpoint_every == 0 else full for i in range(n_layers)]\n"
    "    worst = sum(kept)\n"
    "    for j in range(n_layers):\n"
    "        if (j + 1) % checkpoint_every == 0:\n"
    "            worst = max(worst, sum(kept[: j + 1]) + full)\n"
    "    return worst\n"
)
# The rebuilt block's input counted once, inside its saved set.
_INPUT_ONCE = _stride_model(
    "    kept = [d_model if i % checkpoint_every == 0 else full for i in range(n_layers)]\n"
    "    worst = sum(kept)\n"
    "    for j in range(n_layers):\n"
    "        if j % checkpoint_every == 0:\n"
    "            worst = max(worst, sum(kept[:j]) + full)\n"
    "    return worst\n"
)
# The lesson's own S hard-coded: right for the lesson's widths only.
_LESSON_S = _stride_model(
    "    full = 1160\n"
    "    kept = [d_model if i % checkpoint_every == 0 else full for i in range(n_layers)]\n"
    "    worst = sum(kept)\n"
    "    for j in range(n_layers):\n"
    "        if j % checkpoint_every == 0:\n"
    "            worst = max(worst, sum(kept[: j + 1]) + full)\n"
    "    return worst\n"
)

# The closest library call: S measured by the memory model (one block's saved bytes per token,
# over 4 bytes), then the rules of section 4: the right function, with course_lib inside.
_LIBRARY_SAVED = """
from dataclasses import replace
from course_lib.memory import activation_bytes
from course_lib.model import TinyGPTConfig

def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    one = TinyGPTConfig(d_model=d_model, n_heads=n_heads, n_layers=1, mlp_ratio=1,
                        max_seq_len=64, attn_impl="sdpa")
    two = replace(one, n_layers=2)
    block = (activation_bytes(two, 1, 64).saved_total
             - activation_bytes(one, 1, 64).saved_total) // (4 * 64)
    full = block - 2 * d_model + 2 * d_mlp  # mlp_ratio 1 above: swap its MLP for d_mlp's
    if checkpoint_every == 0:
        return n_layers * full
    kept = [d_model if i % checkpoint_every == 0 else full for i in range(n_layers)]
    moments = [sum(kept)] + [sum(kept[: j + 1]) + full for j in range(0, n_layers, checkpoint_every)]
    return max(moments)
"""


def _counter(
    *,
    key: str = "storage.data_ptr()",
    size: str = "storage.nbytes()",
    skip: str = "params | inputs",
    call: str = "model(**batch).loss",
) -> str:
    """A saved-tensor counter as a student might write it, one choice changed at a time."""
    return (
        "import torch\n\n"
        "def count_saved_bytes(model, batch):\n"
        "    params = {p.untyped_storage().data_ptr() for p in model.parameters()}\n"
        "    inputs = {t.untyped_storage().data_ptr() for t in batch.values()}\n"
        f"    skip = {skip}\n"
        "    saved = {}\n"
        "    def pack(t):\n"
        "        storage = t.untyped_storage()\n"
        "        if storage.data_ptr() not in skip:\n"
        f"            saved[{key}] = {size}\n"
        "        return t\n"
        "    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):\n"
        f"        {call}\n"
        "    return sum(saved.values())\n"
    )


ITEMS: dict[str, Item] = {
    "predict-time-ratio": Item(
        wrong={  # outside the rule (between 1 and 2): 0
            "the recomputation alone, not the whole step": "predicted_time_ratio = 0.5 / 3",
            "every block run forward and backward twice": "predicted_time_ratio = 2",
        },
        plausible={  # wrong, but between 1 and 2: the completion point, as the right 7/6 earns
            "every block recomputed (the stride ignored)": "predicted_time_ratio = 4 / 3",
            "blocks counted with floor division (1 of 4)": "predicted_time_ratio = 13 / 12",
            "k = 3 blocks recomputed": "predicted_time_ratio = 1.25",
            "a backward pass as costly as a forward pass": "predicted_time_ratio = (2 + 0.5) / 2",
            "the recompute set against the forward pass alone": "predicted_time_ratio = 1.5",
            "n_layers / k blocks recomputed": "predicted_time_ratio = (3 + 4 / 3 / 4) / 3",
            "the rule of thumb's 30 %": "predicted_time_ratio = 1.3",
        },
        # the stride's recomputed blocks counted by the library, then the count of section 1
        library=(
            "from course_lib.lessons.checkpointing import stride_rows\n"
            "(row,) = stride_rows(config, 1, 64, {}, strides=(3,))\n"
            "predicted_time_ratio = (3 + row.recomputed / n_layers) / 3"
        ),
    ),
    "predict-peak-ratio": Item(
        wrong={  # outside the rule (between 1 and 4): 0
            "the cut is n_layers": "predicted_peak_ratio = 4",
            "forgets the rebuilt block": "predicted_peak_ratio = 4640 / 256",
            "inverted": "predicted_peak_ratio = (4 * 64 + 1160) / 4640",
        },
        plausible={  # wrong, but between 1 and 4: the completion point, as the right 3.28 earns
            "the rebuilt block's input counted once": "predicted_peak_ratio = 4640 / (3 * 64 + 1160)",
            "the bottom block's rebuild as the worst moment": (
                "predicted_peak_ratio = 4640 / (64 + 1160)"
            ),
            "the measured cut (full memory model)": "predicted_peak_ratio = 3.24",
        },
        # S from the library's memory model (one block's saved bytes per token), then the rules
        library=(
            "one, two = replace(config, n_layers=1), replace(config, n_layers=2)\n"
            "S = (activation_bytes(two, 1, 64).saved_total\n"
            "     - activation_bytes(one, 1, 64).saved_total) // (4 * 64)\n"
            "predicted_peak_ratio = n_layers * S / (n_layers * d_model + S)"
        ),
    ),
    "saved-values-per-token": Item(
        grader="_reference",
        wrong={
            "forgets that the blocks above a rebuilt one are freed": _NO_WALK,
            "counts the checkpointed blocks with floor division": _FLOOR,
            "checkpoints blocks k-1, 2k-1, ... (counted from 1)": _FROM_ONE,
            "the rebuilt block's input counted once": _INPUT_ONCE,
            "the lesson's S as a constant": _LESSON_S,
        },
        library=_LIBRARY_SAVED,
    ),
    "count-saved-bytes": Item(
        wrong={
            "every saved tensor counted, views of one storage again and again": _counter(
                key="len(saved)"
            ),
            "the parameters counted too": _counter(skip="inputs"),
            "the batch's token ids counted too": _counter(skip="params"),
            "each tensor's own elements instead of its storage": _counter(
                size="t.numel() * t.element_size()"
            ),
            "the forward pass without its loss": _counter(
                call="model(input_ids=batch['input_ids'])"
            ),
            "counted under torch.no_grad()": _counter(
                call="with torch.no_grad(): model(**batch).loss"
            ),
        },
        # the course's own meter: the right count, by way of course_lib
        library=(
            "from course_lib.memory import measure\n\n"
            "def count_saved_bytes(model, batch):\n"
            "    return measure(lambda: model(**batch).loss).saved_bytes\n"
        ),
    ),
    "target-practice": Item(
        wrong={
            "longer than fits": "target_seq_len, target_every = 768, 2",
            "fits, not the longest": "target_seq_len, target_every = 512, 4",
            "the right length, a stride that misses it": "target_seq_len, target_every = 640, 3",
            "every block recomputed (over the limit of 4)": "target_seq_len, target_every = 2048, 1",
            "the longest row without checkpointing": "target_seq_len, target_every = 384, 8",
        },
        # the library's memory model searched over every allowed stride and length
        library=(
            "_deep = replace(config, n_layers=8, max_seq_len=8192, checkpointing='blocks')\n"
            "target_seq_len, target_every = max(\n"
            "    ((t, k) for k in range(2, 9) for t in range(128, 8193, 128)\n"
            "     if activation_bytes(replace(_deep, checkpoint_every=k), 1, t).total\n"
            "     <= memory_budget), key=lambda p: (p[0], -p[1]))"
        ),
    ),
}
