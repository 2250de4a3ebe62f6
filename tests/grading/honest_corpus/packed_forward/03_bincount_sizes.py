import torch


def packed_forward(model, batch):
    """One forward of a packed batch that holds only `input_ids` and `position_ids` (R, T),
    with every document attending only to itself."""
    input_ids, position_ids = batch["input_ids"], batch["position_ids"]
    restarts = (position_ids.reshape(-1) == 0).to(torch.long)
    doc = torch.cumsum(restarts, dim=0) - 1          # document index of every token
    sizes = torch.bincount(doc)                       # tokens per document
    cu = torch.zeros(len(sizes) + 1, dtype=torch.int32, device=input_ids.device)
    cu[1:] = torch.cumsum(sizes, dim=0)
    return model(input_ids=input_ids, position_ids=position_ids, cu_seq_lens=cu)
