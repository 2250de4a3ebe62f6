def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):
    """The largest n >= 0 with fixed_bytes + n * row_bytes <= memory_budget (all in bytes)."""
    budget, fixed, row = int(memory_budget), int(fixed_bytes), int(row_bytes)
    if fixed > budget:
        return 0
    return (budget - fixed) // row
