def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    """The simple model's saved activations per token at the worst moment of the backward pass,
    in values (an int). checkpoint_every=0: no block is checkpointed; k >= 1: blocks 0, k, 2k, ...
    keep only their input (d_model values) and are rebuilt in full when the backward reaches them.
    """
    plain = 10 * d_model + 2 * d_mlp + n_heads + 4   # S
    if checkpoint_every == 0:
        return n_layers * plain
    k = checkpoint_every
    n_ckpt = (n_layers + k - 1) // k                 # blocks 0, k, 2k, ... below n_layers
    after_forward = n_ckpt * d_model + (n_layers - n_ckpt) * plain
    best = after_forward
    for j in range(0, n_layers, k):                  # each checkpointed block j
        ckpts_upto_j = j // k + 1
        plains_upto_j = (j + 1) - ckpts_upto_j
        best = max(best, ckpts_upto_j * d_model + plains_upto_j * plain + plain)
    return best
