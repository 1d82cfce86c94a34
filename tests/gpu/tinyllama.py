"""The 2-layer Llama training step the GPU tests compile (transformers; skipped without it)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch


def tiny_llama() -> tuple[torch.nn.Module, Callable[[torch.Tensor], torch.Tensor], torch.Tensor]:
    """(model, step, ids): a seeded 2-layer Llama in bf16 on cuda, its training step, a batch."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=4096, hidden_size=512, intermediate_size=1376,
                                   num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
                                   max_position_embeddings=512)
    model = transformers.LlamaForCausalLM(cfg).cuda().to(torch.bfloat16)
    ids = torch.randint(0, cfg.vocab_size, (2, 128), device="cuda")

    def step(ids: torch.Tensor) -> torch.Tensor:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    return model, step, ids
