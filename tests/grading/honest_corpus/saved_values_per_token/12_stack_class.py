class _Stack:
    def __init__(self):
        self.items = []

    def push(self, n):
        self.items.append(n)

    def pop(self):
        return self.items.pop()

    def size(self):
        return sum(self.items)


def saved_values_per_token(n_layers, d_model, d_mlp, n_heads, checkpoint_every):
    """The simple model's saved activations per token at the worst moment of the backward pass,
    in values (an int). checkpoint_every=0: no block is checkpointed; k >= 1: blocks 0, k, 2k, ...
    keep only their input (d_model values) and are rebuilt in full when the backward reaches them.
    """
    full = 10 * d_model + 2 * d_mlp + n_heads + 4
    stack = _Stack()
    marks = []
    for b in range(n_layers):
        ck = checkpoint_every > 0 and b % checkpoint_every == 0
        stack.push(d_model if ck else full)
        marks.append(ck)
    peak = stack.size()
    for b in reversed(range(n_layers)):
        if marks[b]:
            peak = max(peak, stack.size() + full)
        stack.pop()
    return peak
