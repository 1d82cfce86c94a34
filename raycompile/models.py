"""Small real models, defined here so the demo and the tests need no downloads."""

from __future__ import annotations

import torch
from torch import nn


class TransformerBlock(nn.Module):
    """A pre-norm Llama-style block: RMSNorm, causal self-attention with rotary embeddings, SwiGLU."""

    def __init__(self, dim: int = 64, heads: int = 4, hidden: int = 172) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.RMSNorm(dim)
        self.norm2 = nn.RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def _rotary(self, x: torch.Tensor) -> torch.Tensor:
        t, d = x.shape[-2], x.shape[-1]
        inv = 1.0 / (10000 ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
        ang = torch.arange(t, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (y.transpose(1, 2) for y in (q, k, v))
        q, k = self._rotary(q), self._rotary(k)
        att = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(att.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class ConvNet(nn.Module):
    """Conv + batch norm + ReLU stages, then global pooling and a classifier."""

    def __init__(self, channels: int = 16, classes: int = 10) -> None:
        super().__init__()
        c = channels
        self.features = nn.Sequential(
            nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU(),
            nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.BatchNorm2d(2 * c), nn.ReLU(),
            nn.Conv2d(2 * c, 2 * c, 3, padding=1), nn.BatchNorm2d(2 * c), nn.ReLU(),
        )
        self.head = nn.Linear(2 * c, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


class ReductionTail(nn.Module):
    """An MLP whose tail is reductions: log-softmax, logsumexp, variance, norms, max, cumsum."""

    def __init__(self, dim: int = 96) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.proj(x))
        logp = torch.log_softmax(h, dim=-1)
        stats = torch.stack([
            torch.logsumexp(h, dim=-1), h.var(dim=-1), h.norm(dim=-1),
            h.amax(dim=-1), (logp.exp() * logp).sum(dim=-1),
        ], dim=-1)
        return torch.cat([stats, h.cumsum(dim=-1)[:, -4:]], dim=-1)


def examples(device: str = "cpu") -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    """Each model with an example input, seeded, on ``device``."""
    torch.manual_seed(0)
    out: dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]] = {
        "transformer_block": (TransformerBlock(), (torch.randn(2, 16, 64),)),
        "convnet_bn": (ConvNet().train(), (torch.randn(4, 3, 16, 16),)),
        "reduction_tail": (ReductionTail(), (torch.randn(8, 96),)),
    }
    return {k: (m.to(device), tuple(a.to(device) for a in args)) for k, (m, args) in out.items()}
