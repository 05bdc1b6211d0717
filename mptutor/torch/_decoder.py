"""A small LLaMA-style decoder and a next-token task whose best possible loss is known.

Notebook pytorch/10 shows this code where it first trains the model (pure BF16); later lessons
(pytorch/12, FP4) import it from here instead of writing it again.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mptutor._checks import check_scalar, check_type


class MarkovChain:
    """A fixed random order-2 Markov chain over ``vocab`` tokens, drawn once from a seed.

    ``P[a, b]``, the distribution of the token after ``a, b``, is a softmax of ``sharpness``
    times standard normal numbers. The best possible loss is known: :meth:`floor_loss`.

    Parameters
    ----------
    vocab : int, optional
        Number of tokens, at least 2.
    length : int, optional
        Tokens a model reads, at least 3; :meth:`sample` draws ``length + 1`` (inputs and
        next tokens).
    seed, sharpness : int, float, optional
        Seed of the chain's probabilities; how far they are from uniform (0: uniform).
    """

    def __init__(self, vocab: int = 16, length: int = 16, seed: int = 0, sharpness: float = 3.0):
        self.vocab = check_scalar(vocab, "vocab", int, min_val=2, max_val=4096)
        self.length = check_scalar(length, "length", int, min_val=3, max_val=2**16)
        seed = check_scalar(seed, "seed", int, min_val=0, max_val=2**63 - 1)
        sharpness = check_scalar(sharpness, "sharpness", float, min_val=0, max_val=100)
        gen = torch.Generator().manual_seed(seed)
        self.P = torch.softmax(sharpness * torch.randn(self.vocab, self.vocab, self.vocab,
                                                       generator=gen), dim=-1)

    def sample(self, n: int, seed: int) -> torch.Tensor:
        """Draw ``n`` sequences of ``length + 1`` tokens (int64, CPU), the same on every machine.

        The first two tokens are uniform; each later one follows ``P`` given the two before it.
        """
        n = check_scalar(n, "n", int, min_val=1, max_val=2**31 - 1)
        seed = check_scalar(seed, "seed", int, min_val=0, max_val=2**63 - 1)
        gen = torch.Generator().manual_seed(seed)
        x = torch.empty(n, self.length + 1, dtype=torch.long)
        x[:, :2] = torch.randint(0, self.vocab, (n, 2), generator=gen)
        u = torch.rand(n, self.length + 1, generator=gen)
        cumulative = self.P.cumsum(-1)
        for t in range(2, self.length + 1):  # the first index whose cumulative share exceeds u
            below = u[:, t:t + 1] > cumulative[x[:, t - 2], x[:, t - 1]]
            x[:, t] = below.sum(-1).clamp_max(self.vocab - 1)
        return x

    def _check_sequences(self, x: Any) -> torch.Tensor:
        check_type(x, "x", torch.Tensor, "a torch.Tensor of token ids")
        if x.dtype != torch.long or x.dim() != 2 or x.shape[1] != self.length + 1:
            raise ValueError(
                f"x must be int64 sequences of shape (n, {self.length + 1}), got "
                f"{x.dtype} of shape {tuple(x.shape)}"
            )
        if x.numel() and (x.min() < 0 or x.max() >= self.vocab):
            raise ValueError(f"x holds token ids outside [0, {self.vocab})")
        return x

    def floor_loss(self, x: torch.Tensor) -> torch.Tensor:
        """Return the chain's own mean cross-entropy (nats) on ``x[:, 2:]``: the best loss there.

        The same tokens as :func:`next_token_loss` scores.
        """
        x = self._check_sequences(x).cpu()
        return -self.P[x[:, :-2], x[:, 1:-1], x[:, 2:]].log().mean()

    def __repr__(self) -> str:
        return f"MarkovChain(vocab={self.vocab}, length={self.length})"


def next_token_loss(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy, in FP32 whatever the logits' dtype, of the predictions for ``x[:, 2:]``.

    The model reads ``x[:, :-1]``; its logits at position ``t`` predict ``x[:, t + 1]``. Only
    the tokens with a full order-2 context are scored (positions 1 on), as in
    :meth:`MarkovChain.floor_loss`.
    """
    check_type(logits, "logits", torch.Tensor, "a torch.Tensor")
    check_type(x, "x", torch.Tensor, "a torch.Tensor")
    if logits.dim() != 3 or x.dim() != 2 or logits.shape[:2] != (x.shape[0], x.shape[1] - 1):
        raise ValueError(
            f"logits must be (n, t, vocab) for sequences x of shape (n, t + 1), got logits "
            f"{tuple(logits.shape)} and x {tuple(x.shape)}"
        )
    return F.cross_entropy(logits[:, 1:].float().flatten(0, 1), x[:, 2:].flatten())


class Block(nn.Module):
    """RMSNorm, causal attention (``F.scaled_dot_product_attention``), RMSNorm, SwiGLU."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1, self.qkv = nn.RMSNorm(width), nn.Linear(width, 3 * width, bias=False)
        self.out = nn.Linear(width, width, bias=False)
        self.norm2 = nn.RMSNorm(width)
        self.gate = nn.Linear(width, 4 * width, bias=False)
        self.up = nn.Linear(width, 4 * width, bias=False)
        self.down = nn.Linear(4 * width, width, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, width = h.shape
        q, k, v = self.qkv(self.norm1(h)).view(b, t, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + self.out(y.transpose(1, 2).reshape(b, t, width))
        x = self.norm2(h)
        return h + self.down(F.silu(self.gate(x)) * self.up(x))


class Decoder(nn.Module):
    """A LLaMA-style decoder: embeddings, ``layers`` blocks, a final RMSNorm, a linear head.

    Token and learned position embeddings; blocks of causal attention and a SwiGLU layer of
    width ``4 * width``, each after an RMSNorm, with residuals; no biases. Its linear layers are
    ``blocks.i.qkv``, ``.out``, ``.gate``, ``.up``, ``.down`` and ``head``.

    Parameters
    ----------
    vocab, length, width, heads, layers : int, optional
        Number of tokens, the longest sequence (position embeddings), the model width (a
        multiple of ``heads``), the attention heads, and the number of blocks.
    """

    def __init__(self, vocab: int = 16, length: int = 16, width: int = 64, heads: int = 4,
                 layers: int = 2):
        super().__init__()
        vocab = check_scalar(vocab, "vocab", int, min_val=1, max_val=2**24)
        length = check_scalar(length, "length", int, min_val=1, max_val=2**20)
        width = check_scalar(width, "width", int, min_val=1, max_val=2**16)
        heads = check_scalar(heads, "heads", int, min_val=1, max_val=width)
        layers = check_scalar(layers, "layers", int, min_val=0, max_val=1024)
        if width % heads:
            raise ValueError(f"width ({width}) must be a multiple of heads ({heads})")
        self.embed, self.position = nn.Embedding(vocab, width), nn.Embedding(length, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm, self.head = nn.RMSNorm(width), nn.Linear(width, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.dim() != 2 or tokens.shape[1] > self.position.num_embeddings:
            raise ValueError(
                f"tokens must be (batch, t) with t <= {self.position.num_embeddings}, got "
                f"shape {tuple(tokens.shape)}"
            )
        h = self.embed(tokens) + self.position(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))
