def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    """The simple model's saved activations per token at the worst moment of the backward pass,
    in values (an int). checkpoint_every=0: no block is checkpointed; k >= 1: blocks 0, k, 2k, ...
    keep only their input (d_model values) and are rebuilt in full when the backward reaches them.
    """
    # S: a plain sdpa block's saved values per token (section 1)
    plain_block = 10 * d_model + 2 * d_mlp + n_heads + 4
    checkpointed_block = d_model  # only its input

    def checkpointed(b):
        return checkpoint_every > 0 and b % checkpoint_every == 0

    moments = {}
    kept = [checkpointed_block if checkpointed(b) else plain_block for b in range(n_layers)]
    moments["end of forward"] = sum(kept)
    for b in range(n_layers):
        if checkpointed(b):
            moments[f"rebuilding block {b}"] = sum(kept[: b + 1]) + plain_block
    return max(moments.values())
