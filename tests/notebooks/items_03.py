"""What tests/notebooks/test_assessment.py tries against lesson 03's autograded items."""

from assessment import Item

_MEAN_OF_MEANS = """
def accumulate_token_weighted(model, window):
    for mb in window:  # the common recipe: loss / accum
        (model(**mb).loss / len(window)).backward()
    return sum(int((mb["labels"][..., 1:] != -100).sum()) for mb in window)
"""

_UNSHIFTED = """
def accumulate_token_weighted(model, window):
    counts = [int((mb["labels"] != -100).sum()) for mb in window]  # counts labels[..., 0] too
    for mb, n in zip(window, counts):
        if n:
            model(**mb, num_items_in_batch=sum(counts)).loss.backward()
    return sum(counts)
"""

_STEP_EVERY_MICRO_BATCH = """
import torch
def fixed_train(model, optimizer, loader, accum):
    for micro_batch in loader:  # token-weighted inside one micro-batch, but steps on each one
        model(**micro_batch).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
"""

ITEMS: dict[str, Item] = {
    "predict-weights": Item(
        wrong=[
            "weight_A_accum, weight_A_full, token_ratio = 0.1, 0.5, 9",
            "weight_A_accum, weight_A_full, token_ratio = 0.5, 0.1, 1 / 9",
            "weight_A_accum, weight_A_full, token_ratio = 0.5, 0.1, 1",
        ],
        library=(
            "weight_A_accum = 1 / effective_batch_size(2, 1, 1)\n"
            "weight_A_full = 1 / effective_batch_size(2, 1, 1)\n"
            "token_ratio = tokens_per_step(1, 90, 1, 1) / tokens_per_step(1, 10, 1, 1)"
        ),
        constants=["weight_A_accum", "weight_A_full", "token_ratio"],
    ),
    "accumulate-tokens": Item(
        wrong=[_MEAN_OF_MEANS, _UNSHIFTED],
        library=(
            "def accumulate_token_weighted(model, window):\n"
            "    return accumulate_gradients(model, window, 'token_weighted').window_loss_tokens"
        ),
    ),
    "fix-recipe-loop": Item(
        wrong=["fixed_train = recipe_train", _STEP_EVERY_MICRO_BATCH],
        library=(
            "def fixed_train(model, optimizer, loader, accum):\n"
            "    for s in range(0, len(loader) - accum + 1, accum):\n"
            "        accumulate_gradients(model, loader[s:s + accum], 'token_weighted')\n"
            "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
            "        optimizer.step()\n"
            "        optimizer.zero_grad(set_to_none=True)"
        ),
    ),
    "noise-target": Item(
        # measured, so not a constant: the visible test checks the property "smallest K under the
        # target" against the notebook's own measurement
        wrong=[
            "target_accum_steps = math.ceil(rho_example / (micro_batch_size * noise_target)) + 1",
            "target_accum_steps = math.ceil(rho_example / (micro_batch_size * noise_target)) - 1",
            "target_accum_steps = math.ceil(rho_example / noise_target)",
        ],
        library="target_accum_steps = effective_batch_size(micro_batch_size, grad_accum_steps, 1)",
    ),
    "q2": Item(
        wrong=[
            "q2_factors, q2_same_as_big_batch = (1, 1, 8, 8, 1 / 8), True",
            "q2_factors, q2_same_as_big_batch = (8, 1, 8, 8, 1 / 8), False",
            "q2_factors, q2_same_as_big_batch = (1, 1, 8, 8, 8), False",
            "q2_factors, q2_same_as_big_batch = (1, 8, 8, 8, 1 / 8), False",
        ],
        library=(
            "from course_lib.budget import steps_per_epoch\n"
            "q2_factors = (1, 1, effective_batch_size(2, 8, 1), tokens_per_step(2, 512, 8, 1),\n"
            "              steps_per_epoch(1600, effective_batch_size(2, 8, 1)))\n"
            "q2_same_as_big_batch = False"
        ),
        constants=["q2_factors", "q2_same_as_big_batch"],
    ),
}
