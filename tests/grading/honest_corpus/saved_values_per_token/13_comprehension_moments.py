def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    """The simple model's saved activations per token at the worst moment of the backward pass,
    in values (an int). checkpoint_every=0: no block is checkpointed; k >= 1: blocks 0, k, 2k, ...
    keep only their input (d_model values) and are rebuilt in full when the backward reaches them.
    """
    S = 10 * d_model + 2 * d_mlp + n_heads + 4
    if checkpoint_every == 0:
        return n_layers * S
    kept = [d_model if i % checkpoint_every == 0 else S for i in range(n_layers)]
    rebuilding = [sum(kept[: j + 1]) + S for j in range(n_layers) if j % checkpoint_every == 0]
    return max([sum(kept), *rebuilding])
