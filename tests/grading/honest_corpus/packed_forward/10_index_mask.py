import torch


def packed_forward(model, batch):
    """One forward of a packed batch that holds only `input_ids` and `position_ids` (R, T),
    with every document attending only to itself."""
    # Where does each document begin? Exactly where its position id is 0.
    position_ids = batch["position_ids"]
    begin = (position_ids == 0).flatten()
    index = torch.arange(begin.numel(), device=position_ids.device)
    cu = torch.cat([index[begin], index.new_full((1,), begin.numel())])
    return model(input_ids=batch["input_ids"], position_ids=position_ids,
                 cu_seq_lens=cu.to(dtype=torch.int32))
