"""What tests/notebooks/test_assessment.py tries against lesson 04's autograded items."""

from assessment import Item

# A stride model that forgets that the blocks above a rebuilt block are already freed (it adds S
# to everything kept): right for every block checkpointed, wrong for strides.
_NO_WALK = """
def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    full = 10 * d_model + 2 * d_mlp + n_heads + 4
    if checkpoint_every == 0:
        return n_layers * full
    c = -(-n_layers // checkpoint_every)
    return c * d_model + (n_layers - c) * full + full
"""

# Every block's kept set plus one rebuilt block, checkpointed blocks counted with floor division.
_FLOOR = """
def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    full = 10 * d_model + 2 * d_mlp + n_heads + 4
    if checkpoint_every == 0:
        return n_layers * full
    c = max(1, n_layers // checkpoint_every)
    return max(c * d_model + (n_layers - c) * full, (c - 1) * d_model + full + d_model)
"""

# The closest library call: the full memory model's saved bytes per token, divided by 4 bytes.
_LIBRARY_SAVED = """
def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    cfg = TinyGPTConfig(d_model=d_model, n_heads=n_heads, n_layers=n_layers,
                        mlp_ratio=d_mlp // d_model, max_seq_len=128,
                        checkpointing="blocks" if checkpoint_every else "none",
                        checkpoint_every=max(checkpoint_every, 1))
    return round(activation_bytes(cfg, 1, 128).saved_total / (4 * 128))
"""

ITEMS: dict[str, Item] = {
    "predict-time-ratio": Item(
        wrong=[
            "predicted_time_ratio = 1.5",
            "predicted_time_ratio = 2",
            "predicted_time_ratio = 1.3",
        ],
        # the measured ratio is the library's answer, read to one decimal as a student would read
        # it off the printout (1.2-1.4 on a CPU, never 4/3): rounded, so a lucky timing on a busy
        # machine cannot land within the hidden test's tolerance of 4/3 and make this test flaky
        library=(
            "predicted_time_ratio = round(time_checkpointing(config, batch_size, timing_seq_len, "
            "repeats=3, seed=seed).ratio, 1)"
        ),
        constants=["predicted_time_ratio"],
    ),
    "predict-peak-ratio": Item(
        wrong=[
            "predicted_peak_ratio = 4",
            "predicted_peak_ratio = 4640 / 256",
            "predicted_peak_ratio = 3.25",
        ],
        # the full memory model's bytes ratio at the longest rows (3.24), not the simple model's
        library=(
            "predicted_peak_ratio = (activation_bytes(config, batch_size, 1024, checkpointing="
            "'none').total / activation_bytes(config, batch_size, 1024, "
            "checkpointing='blocks').total)"
        ),
        constants=["predicted_peak_ratio"],
    ),
    "saved-values-per-token": Item(
        wrong=[_NO_WALK, _FLOOR],
        library="from course_lib.model import TinyGPTConfig\n" + _LIBRARY_SAVED,
    ),
    "target-practice": Item(
        wrong=[
            "target_seq_len, target_every = 768, 2",  # longer than fits
            "target_seq_len, target_every = 512, 4",  # fits, not the longest
            "target_seq_len, target_every = 640, 3",  # the right length, a stride that misses it
            "target_seq_len, target_every = 2048, 1",  # every block recomputed: over the limit
        ],
        # the library's longest row with every block checkpointed: 8 of 8 recomputed, and not a
        # multiple of 128
        library=(
            "from course_lib.lessons.checkpointing import max_seq_len_under_budget\n"
            "target_every = 1\n"
            "target_seq_len = max_seq_len_under_budget(replace(config, n_layers=8), 1, "
            "memory_budget, checkpointing=True)"
        ),
        constants=["target_seq_len"],
    ),
    "q1-only-checkpointing": Item(
        wrong=['q1_answer = "A"', 'q1_answer = "D"', 'q1_answer = "E"'],
        # what the memory model can say is which shapes do not fit plain, not which lever to pull
        library=(
            "q1_answer = ''.join(letter for letter, t in zip('ABCDE', (2048, 8192, 8192, 8192, "
            "8192)) if max_batch_under_budget(replace(config, max_seq_len=8192), t, "
            "memory_budget, checkpointing=False) == 0)"
        ),
        constants=["q1_answer"],
    ),
}
