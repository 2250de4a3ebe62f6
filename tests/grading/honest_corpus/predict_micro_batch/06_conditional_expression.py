def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):
    """The largest n >= 0 with fixed_bytes + n * row_bytes <= memory_budget (all in bytes)."""
    n = (memory_budget - fixed_bytes) // row_bytes
    return n if n > 0 else 0
