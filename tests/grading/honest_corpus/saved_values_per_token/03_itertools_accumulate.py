from itertools import accumulate


def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    s = 10 * d_model + 2 * d_mlp + n_heads + 4
    if not checkpoint_every:
        return n_layers * s
    ck = [b % checkpoint_every == 0 for b in range(n_layers)]
    per_block = [d_model if c else s for c in ck]
    prefix = list(accumulate(per_block))
    moments = [prefix[-1]] + [prefix[b] + s for b in range(n_layers) if ck[b]]
    return int(max(moments))
