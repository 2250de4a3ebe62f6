def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    """(other, scores): values one eager TinyGPT block keeps for backward, per token."""
    saved = [
        ("ln1", d_model + 2),
        ("qkv", d_model),
        ("q,k", 2 * d_model),
        ("v", d_model),
        ("proj", d_model),
        ("ln2", d_model + 2),
        ("up", d_model),
        ("gelu", d_mlp),
        ("down", d_mlp),
    ]
    total = 0
    for name, n in saved:
        total += n
    return (total, n_heads * seq_len)
