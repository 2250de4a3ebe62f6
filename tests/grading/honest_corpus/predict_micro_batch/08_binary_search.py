def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):
    """The largest n >= 0 with fixed_bytes + n * row_bytes <= memory_budget (all in bytes)."""
    def fits(n):
        return fixed_bytes + n * row_bytes <= memory_budget

    if not fits(0):
        return 0
    lo, hi = 0, 1
    while fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo
