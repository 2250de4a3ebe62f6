def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    S = 10 * d_model + 2 * d_mlp + n_heads + 4

    def rebuilt(i):
        return checkpoint_every > 0 and i % checkpoint_every == 0

    def kept(i):
        return d_model if rebuilt(i) else S

    def worst_from(top, alive):
        # the backward pass has reached block `top`; `alive` is what blocks 0..top keep
        if top < 0:
            return 0
        here = alive + S if rebuilt(top) else alive
        return max(here, worst_from(top - 1, alive - kept(top)))

    total = sum(kept(i) for i in range(n_layers))
    return max(total, worst_from(n_layers - 1, total))
