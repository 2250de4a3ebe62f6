def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    """(other, scores): values one eager TinyGPT block keeps for backward, per token."""
    stats = 2  # LayerNorm's mean and rstd
    attn_half = (d_model + stats) + d_model + d_model + d_model + d_model + d_model
    mlp_half = (d_model + stats) + d_model + d_mlp + d_mlp
    return attn_half + mlp_half, n_heads * seq_len
