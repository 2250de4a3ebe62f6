def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    """(other, scores): values one eager TinyGPT block keeps for backward, per token."""
    # How many d_model-wide tensors are stored per token:
    #   LN1 in, qkv in, q, k, v, proj in, LN2 in, MLP up in  -> 8
    n_wide = 8
    # LayerNorm stats: mean and rstd, two LayerNorms
    n_stats = 2 * 2
    # MLP hidden: GELU input and down-projection input
    n_hidden = 2
    other = n_wide * d_model + n_stats + n_hidden * d_mlp
    scores = seq_len * n_heads  # one probability per (head, key) for each query token
    return other, scores
