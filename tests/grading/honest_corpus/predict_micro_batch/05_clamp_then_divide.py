def predict_micro_batch(memory_budget, fixed_bytes, row_bytes):
    # bytes left after the weights, gradients and optimiser state (never below zero)
    activations_room = max(memory_budget - fixed_bytes, 0)
    return activations_room // row_bytes
