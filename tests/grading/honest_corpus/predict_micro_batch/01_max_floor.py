def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):
    """The largest n >= 0 with fixed_bytes + n * row_bytes <= memory_budget (all in bytes)."""
    return max(0, (memory_budget - fixed_bytes) // row_bytes)
