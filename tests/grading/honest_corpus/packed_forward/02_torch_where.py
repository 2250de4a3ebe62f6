import torch


def packed_forward(model, batch):
    """One forward of a packed batch that holds only `input_ids` and `position_ids` (R, T),
    with every document attending only to itself."""
    position_ids = batch["position_ids"]
    n_rows, n_cols = position_ids.shape
    flat = position_ids.view(-1)
    (boundaries,) = torch.where(flat == 0)
    total = torch.tensor([n_rows * n_cols], device=flat.device)
    cu_seq_lens = torch.cat((boundaries, total)).int()
    out = model(input_ids=batch["input_ids"], position_ids=position_ids, cu_seq_lens=cu_seq_lens)
    return out
