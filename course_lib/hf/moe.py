"""A mixture-of-experts block (Mixtral, Qwen3-MoE) as ops: routed tokens per expert."""

from __future__ import annotations


def moe_block(ops, arch, spec, name, h, full, ad, layer) -> int:
    raise NotImplementedError("mixture of experts: not modelled yet")
