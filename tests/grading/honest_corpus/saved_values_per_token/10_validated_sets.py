def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    """The simple model's saved activations per token at the worst moment of the backward pass,
    in values (an int). checkpoint_every=0: no block is checkpointed; k >= 1: blocks 0, k, 2k, ...
    keep only their input (d_model values) and are rebuilt in full when the backward reaches them.
    """
    if n_layers < 1 or checkpoint_every < 0:
        raise ValueError(f"need n_layers >= 1 and checkpoint_every >= 0, got {n_layers}, "
                         f"{checkpoint_every}")
    # S from section 1 (sdpa block): 10 C + 2 d_mlp + H + 4 values per token
    S = 10 * d_model + 2 * d_mlp + n_heads + 4
    ckpt = set(range(0, n_layers, checkpoint_every)) if checkpoint_every else set()
    forward_end = sum(d_model if b in ckpt else S for b in range(n_layers))
    peaks = [forward_end]
    for j in sorted(ckpt):
        n_ck = len([b for b in ckpt if b <= j])
        n_plain = len([b for b in range(j + 1) if b not in ckpt])
        peaks.append(n_ck * d_model + n_plain * S + S)
    return max(peaks)
