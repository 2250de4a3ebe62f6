def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    # Per token: two LayerNorms (input + 2 stats each), Linear inputs for qkv, proj, fc1, fc2,
    # q and k for the score matmul, v for att@v; the probabilities are per head per key.
    other = 8 * d_model + 2 * d_mlp + 4
    scores = n_heads * seq_len
    return (other, scores)
