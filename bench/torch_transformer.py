"""The PyTorch reference for bench/train_throughput.py: `nn.Transformer` with embeddings, sinusoids and an output
projection, trained with the same Adam, Noam schedule and label-smoothed loss as kmt.

Post-norm (`norm_first=False`, the paper's), `batch_first=True`. One token embedding serves source and target (a
joint vocabulary, as in kmt); the pre-softmax projection is a separate `nn.Linear` (untied). Two differences from
kmt that `nn.Transformer` fixes by design: a final LayerNorm on each stack, and dropout after the feed-forward ReLU
(as well as on residuals and attention weights).

Needs the CPU build: `pip install torch==2.13.0`.
"""

import math

import keras
import torch
from torch import nn

from common import median, timed
from kmt.layers.embedding import positional_encoding


def noam(step, hidden_dim, warmup_steps):
    """kmt's NoamSchedule: `hidden_dim**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)`, step counted from 1."""
    return hidden_dim**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


class TorchTransformer(nn.Module):
    """Token embedding times sqrt(D) plus sinusoids, `nn.Transformer`, and a linear projection to the vocabulary.

    Args:
        vocab_size: int. Joint vocabulary size V.
        num_layers: int. Encoder and decoder layers each.
        hidden_dim: int. d_model D.
        num_heads: int. Attention heads H.
        intermediate_dim: int. Feed-forward inner size.
        dropout: float. Dropout everywhere `nn.Transformer` has it, and on the embeddings.
        max_length: int. Longest source or target sequence.

    Call arguments:
        source: `(B, S)` int64 ids, pad id 0.
        target_in: `(B, T)` int64 ids, pad id 0.

    Returns logits `(B, T, V)`.

    Example:
    >>> model = TorchTransformer(100, num_layers=1, hidden_dim=16, num_heads=2, intermediate_dim=32, dropout=0.1,
    ...                          max_length=8)
    >>> model(torch.ones(2, 7, dtype=torch.long), torch.ones(2, 5, dtype=torch.long)).shape
    torch.Size([2, 5, 100])
    """

    def __init__(self, vocab_size, num_layers, hidden_dim, num_heads, intermediate_dim, dropout, max_length):
        super().__init__()
        self.hidden_dim = hidden_dim
        self.embedding = nn.Embedding(vocab_size, hidden_dim)
        table = keras.ops.convert_to_numpy(positional_encoding(max_length, hidden_dim))  # (L, D), kmt's own
        self.register_buffer("positions", torch.from_numpy(table), persistent=False)
        self.embedding_dropout = nn.Dropout(dropout)
        self.transformer = nn.Transformer(
            d_model=hidden_dim,
            nhead=num_heads,
            num_encoder_layers=num_layers,
            num_decoder_layers=num_layers,
            dim_feedforward=intermediate_dim,
            dropout=dropout,
            batch_first=True,
            norm_first=False,
        )
        self.output_projection = nn.Linear(hidden_dim, vocab_size)

    def embed(self, ids):
        length = ids.shape[1]
        x = self.embedding(ids) * math.sqrt(self.hidden_dim) + self.positions[:length]  # (B, L, D)
        return self.embedding_dropout(x)

    def forward(self, source, target_in):
        length = target_in.shape[1]
        # torch's masks are the negation of kmt's: True means "may NOT attend".
        source_padding = source == 0  # (B, S)
        target_padding = target_in == 0  # (B, T)
        causal = torch.ones(length, length, dtype=torch.bool, device=target_in.device).triu(1)  # (T, T)
        states = self.transformer(
            self.embed(source),
            self.embed(target_in),
            tgt_mask=causal,
            src_key_padding_mask=source_padding,
            tgt_key_padding_mask=target_padding,
            memory_key_padding_mask=source_padding,
            tgt_is_causal=True,
        )  # (B, T, D)
        return self.output_projection(states)  # (B, T, V)


class TorchTrainer:
    """Runs training steps of a `TorchTransformer` on fixed batches: Adam(0.9, 0.98, 1e-9) under a Noam
    `LambdaLR`, `CrossEntropyLoss(label_smoothing, ignore_index=0)`, and token accuracy over non-pad targets (what
    kmt's `MaskedAccuracy` costs a Keras step; kmt's `MaskedPerplexity` repeats its loss's ops, which TensorFlow can
    share, so torch does not recompute a cross-entropy for it here).

    Args:
        model: a `TorchTransformer`.
        batches: list of `(source (B, S), target_in (B, T), target_out (B, T))` int numpy arrays.
        hidden_dim: int. d_model, for the schedule.
        warmup_steps: int. Noam warm-up. Defaults to `4000`.
        label_smoothing: float. Defaults to `0.1`.
        bfloat16: bool. Run forward and loss under `torch.autocast(bfloat16)`. Defaults to `False`.
    """

    def __init__(self, model, batches, hidden_dim, warmup_steps=4000, label_smoothing=0.1, bfloat16=False):
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = model.to(self.device).train()
        self.batches = [tuple(torch.from_numpy(a).long().to(self.device) for a in batch) for batch in batches]
        self.bfloat16 = bfloat16
        self.optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda iteration: noam(iteration + 1, hidden_dim, warmup_steps)
        )
        self.loss = nn.CrossEntropyLoss(label_smoothing=label_smoothing, ignore_index=0)

    def epoch(self, steps):
        """Runs `steps` training steps, cycling over the batches; returns the last loss and the token accuracy."""
        correct = torch.zeros((), device=self.device)
        total = torch.zeros((), device=self.device)
        for step in range(steps):
            source, target_in, target_out = self.batches[step % len(self.batches)]
            with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.bfloat16):
                logits = self.model(source, target_in)  # (B, T, V)
                loss = self.loss(logits.reshape(-1, logits.shape[-1]), target_out.reshape(-1))  # (B*T, V)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self.schedule.step()
            with torch.no_grad():
                real = target_out != 0  # (B, T)
                correct += ((logits.argmax(-1) == target_out) & real).sum()
                total += real.sum()
        # .item() waits for the device, so the caller's clock sees the whole epoch.
        return loss.item(), (correct / total.clamp(min=1)).item()


def matmul_tflops(size, repeats):
    """Median float32 TFLOP/s of one `(size, size) @ (size, size)` matmul in torch."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    (a @ b)[0, 0].item()  # warm-up
    seconds = [timed(lambda: (a @ b)[0, 0].item())[1] for _ in range(repeats)]  # .item() waits for the device
    return 2 * size**3 / median(seconds) / 1e12


def count_parameters(model):
    return sum(parameter.numel() for parameter in model.parameters())
