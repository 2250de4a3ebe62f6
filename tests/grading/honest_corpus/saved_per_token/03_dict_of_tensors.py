def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    """(other, scores): values one eager TinyGPT block keeps for backward, per token."""
    kept = {
        "ln_1 input": d_model, "ln_1 mean/rstd": 2,
        "c_attn input": d_model,
        "q": d_model, "k": d_model, "v": d_model,
        "c_proj input": d_model,
        "ln_2 input": d_model, "ln_2 mean/rstd": 2,
        "fc input": d_model,
        "gelu input": d_mlp,
        "fc2 input": d_mlp,
    }
    return sum(kept.values()), n_heads * seq_len
