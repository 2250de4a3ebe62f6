import torch


def packed_forward(model, batch):
    p = batch["position_ids"].flatten()
    # a new document wherever the position does not continue the one before
    new_doc = torch.ones_like(p, dtype=torch.bool)
    new_doc[1:] = p[1:] != p[:-1] + 1
    starts = new_doc.nonzero(as_tuple=True)[0]
    cu_seq_lens = torch.cat([starts, starts.new_tensor([p.numel()])]).to(torch.int32)
    return model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
                 cu_seq_lens=cu_seq_lens)
