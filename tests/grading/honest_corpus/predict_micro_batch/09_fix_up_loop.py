def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):
    """The largest n >= 0 with fixed_bytes + n * row_bytes <= memory_budget (all in bytes)."""
    n = max(0, (memory_budget - fixed_bytes) // row_bytes)
    # make sure: the n found fits, and one more row does not
    while n > 0 and fixed_bytes + n * row_bytes > memory_budget:
        n -= 1
    while fixed_bytes + (n + 1) * row_bytes <= memory_budget:
        n += 1
    return n
