def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    """The simple model's saved activations per token at the worst moment of the backward pass,
    in values (an int). checkpoint_every=0: no block is checkpointed; k >= 1: blocks 0, k, 2k, ...
    keep only their input (d_model values) and are rebuilt in full when the backward reaches them.
    """
    block_saved = 10 * d_model + 2 * d_mlp + n_heads + 4
    total = 0
    heights = []  # memory alive below-and-including each checkpointed block
    for layer in range(n_layers):
        if checkpoint_every and layer % checkpoint_every == 0:
            total += d_model
            heights.append((layer, total))
        else:
            total += block_saved
    answer = total
    for layer, below in heights:
        answer = max(answer, below + block_saved)
    return answer
