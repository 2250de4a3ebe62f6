def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    """(other, scores): values one eager TinyGPT block keeps for backward, per token."""
    for name, value in (("d_model", d_model), ("d_mlp", d_mlp), ("n_heads", n_heads),
                        ("seq_len", seq_len)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    ln = lambda width: width + 2  # noqa: E731
    attention_inputs = d_model * 5  # qkv input, q, k, v, out-proj input
    mlp_inputs = d_model + 2 * d_mlp
    other = ln(d_model) + attention_inputs + ln(d_model) + mlp_inputs
    scores = n_heads * seq_len
    return other, scores
