def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):
    """The largest n >= 0 with fixed_bytes + n * row_bytes <= memory_budget (all in bytes)."""
    available_for_activations = memory_budget - fixed_bytes
    whole_rows = available_for_activations // row_bytes
    largest_n = max(whole_rows, 0)
    return int(largest_n)
