def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    """The simple model's saved activations per token at the worst moment of the backward pass,
    in values (an int). checkpoint_every=0: no block is checkpointed; k >= 1: blocks 0, k, 2k, ...
    keep only their input (d_model values) and are rebuilt in full when the backward reaches them.
    """
    S = 10 * d_model + 2 * d_mlp + n_heads + 4
    C = d_model
    if checkpoint_every == 0:
        return n_layers * S

    def is_ckpt(i):
        return i % checkpoint_every == 0

    keeps = [C if is_ckpt(i) else S for i in range(n_layers)]
    peak = sum(keeps)
    running = 0
    for i in range(n_layers):
        running += keeps[i]
        if is_ckpt(i):
            peak = max(peak, running + S)
    return peak
