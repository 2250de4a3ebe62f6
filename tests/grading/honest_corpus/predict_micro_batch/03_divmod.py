def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):
    left = memory_budget - fixed_bytes
    if left <= 0:
        return 0
    rows, _unused = divmod(left, row_bytes)
    return rows
