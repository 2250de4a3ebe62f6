def saved_per_token(d_model, d_mlp, n_heads, seq_len):
    # (count of tensors, width of each) for everything but the attention probabilities
    layout = [(8, d_model), (2, d_mlp), (4, 1)]
    other = sum(count * width for count, width in layout)
    return other, n_heads * seq_len
