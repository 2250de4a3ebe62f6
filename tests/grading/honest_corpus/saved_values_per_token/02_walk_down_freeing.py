def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    full_block = 10 * d_model + 2 * d_mlp + n_heads + 4
    if checkpoint_every <= 0:
        return n_layers * full_block
    stored = []
    for block in range(n_layers):
        checkpointed = block % checkpoint_every == 0
        stored.append(d_model if checkpointed else full_block)
    alive = sum(stored)
    worst = alive
    # backward: from the top block down
    for block in reversed(range(n_layers)):
        if block % checkpoint_every == 0:
            worst = max(worst, alive + full_block)  # rebuilt on top of what is still alive
        alive -= stored[block]  # freed once its backward is done
    return worst
