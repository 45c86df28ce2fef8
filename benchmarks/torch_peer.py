"""The PyTorch eager peer for the training-step benchmark (optional: needs torch).

The same model as ours: post-norm encoder-decoder (§3.1), tied shared
embedding ×√d_model (§3.4), sinusoidal positions (§3.5), dropout, label
smoothing (§5.4), Adam 0.9/0.98/1e-9 (§5.3). Run by `python -m train bench`
in a subprocess, so torch never enters the package; prints one JSON object.

    python benchmarks/torch_peer.py --device cuda --precision bf16 --batch 250 --src-len 100 --tgt-len 100
"""
from __future__ import annotations

import argparse
import json
import math
import time

import torch
from torch import nn


class PeerTransformer(nn.Module):
    """Ours in `nn.Transformer`: its layers with the paper's dropout (§5.4: on the residuals and the
    embedding sums; none on the attention weights or inside the FFN, as ours by default) and no
    LayerNorm after either stack (post-norm already ends each layer with one, §3.1)."""

    def __init__(self, vocab, d_model, n_layers, h, d_ff, p_drop, layernorm_eps=1e-6):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)
        layers = [nn.TransformerEncoderLayer(d_model, h, d_ff, p_drop, batch_first=True, layer_norm_eps=layernorm_eps),
                  nn.TransformerDecoderLayer(d_model, h, d_ff, p_drop, batch_first=True, layer_norm_eps=layernorm_eps)]
        for layer in layers:
            layer.dropout = nn.Identity()                              # inside the FFN
            for attention in (layer.self_attn, getattr(layer, "multihead_attn", None)):
                if attention is not None:
                    attention.dropout = 0.0                            # on the attention weights
        self.transformer = nn.Transformer(
            d_model, h, batch_first=True,
            custom_encoder=nn.TransformerEncoder(layers[0], n_layers, enable_nested_tensor=False),
            custom_decoder=nn.TransformerDecoder(layers[1], n_layers))
        self.drop = nn.Dropout(p_drop)
        pos = torch.arange(4096).unsqueeze(1)
        div = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(4096, d_model)
        pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
        self.register_buffer("pe", pe)

    def embed_tokens(self, ids):
        return self.drop(self.embed(ids) * math.sqrt(self.d_model) + self.pe[: ids.shape[1]])

    def forward(self, src, tgt):
        causal = torch.ones(tgt.shape[1], tgt.shape[1], dtype=torch.bool, device=tgt.device).triu(1)
        out = self.transformer(self.embed_tokens(src), self.embed_tokens(tgt), tgt_mask=causal,
                               src_key_padding_mask=src == 0, tgt_key_padding_mask=tgt == 0,
                               memory_key_padding_mask=src == 0)
        return out @ self.embed.weight.T                               # tied pre-softmax weight


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16", "fp16"])
    ap.add_argument("--vocab", type=int, default=37000)
    ap.add_argument("--d-model", type=int, default=512)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--d-ff", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=250)
    ap.add_argument("--src-len", type=int, default=100)
    ap.add_argument("--tgt-len", type=int, default=100)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = args.precision == "tf32"
    torch.manual_seed(0)
    model = PeerTransformer(args.vocab, args.d_model, args.layers, args.heads, args.d_ff, 0.1).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1)
    scaler = torch.amp.GradScaler(enabled=args.precision == "fp16")
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, args.vocab, (args.batch, args.src_len), generator=g).to(device)
    tgt = torch.randint(4, args.vocab, (args.batch, args.tgt_len + 1), generator=g).to(device)

    def step():
        with torch.autocast(device.type, dtype=amp_dtype or torch.float32, enabled=amp_dtype is not None):
            logits = model(src, tgt[:, :-1])
            loss = loss_fn(logits.float().reshape(-1, args.vocab), tgt[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(args.warmup):
        step()
    sync()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    step_s = (time.perf_counter() - start) / args.steps
    peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
    print(json.dumps({"peer": "pytorch-eager", "torch": torch.__version__, "precision": args.precision,
                      "step_ms": step_s * 1e3, "tgt_tok_s": args.batch * args.tgt_len / step_s,
                      "peak_mem_bytes": peak, "loss": float(loss.detach())}))


if __name__ == "__main__":
    main()
