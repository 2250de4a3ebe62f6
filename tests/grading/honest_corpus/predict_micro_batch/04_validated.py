def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):
    """The largest n >= 0 with fixed_bytes + n * row_bytes <= memory_budget (all in bytes)."""
    if row_bytes <= 0:
        raise ValueError(f"row_bytes must be positive, got {row_bytes}")
    free = memory_budget - fixed_bytes
    return free // row_bytes if free >= 0 else 0
