"""Write a tiny nanoGPT-format character model: `ckpt.pt` (model_args + model), `meta.pkl` and
the text it learned, `input.txt` (nanoGPT's `data/<name>/input.txt`).

A stand-in for the checkpoint nanoGPT's train.py writes after `prepare.py` of a character
dataset, so `flatformer import` has a file to read from a clean clone. The model is trained for
a few hundred Adam steps on a short text; the layout (names, Linear weights, fused c_attn, tied
lm_head) is nanoGPT's. Usage: python examples/nanogpt_char_model.py OUT_FOLDER
"""

import math
import pickle
import sys
from pathlib import Path

import torch
from torch import nn

TEXT = "the cat sat on the mat. the dog sat on the log. the cat saw the dog.\n" * 8


class Block(nn.Module):
    def __init__(self, d, heads, T, gelu="none"):  # "tanh": GPT-2's gelu_new
        super().__init__()
        self.heads, self.gelu = heads, gelu
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.ModuleDict(dict(c_attn=nn.Linear(d, 3 * d), c_proj=nn.Linear(d, d)))
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(d, 4 * d), c_proj=nn.Linear(4 * d, d)))
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.attn.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (a.view(B, T, self.heads, -1).transpose(1, 2) for a in (q, k, v))
        att = (
            (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
            .masked_fill(~self.mask[:T, :T], float("-inf"))
            .softmax(-1)
        )
        x = x + self.attn.c_proj((att @ v).transpose(1, 2).reshape(B, T, d))
        return x + self.mlp.c_proj(
            nn.functional.gelu(self.mlp.c_fc(self.ln_2(x)), approximate=self.gelu)
        )


def main(out: Path, steps: int = 300):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    chars = sorted(set(TEXT))
    stoi = {c: i for i, c in enumerate(chars)}
    args = dict(
        n_layer=1, n_head=2, n_embd=16, block_size=16, bias=True, vocab_size=len(chars), dropout=0.0
    )
    d, T = args["n_embd"], args["block_size"]
    net = nn.ModuleDict(
        dict(
            transformer=nn.ModuleDict(
                dict(
                    wte=nn.Embedding(len(chars), d),
                    wpe=nn.Embedding(T, d),
                    h=nn.ModuleList([Block(d, 2, T)]),
                    ln_f=nn.LayerNorm(d),
                )
            ),
            lm_head=nn.Linear(d, len(chars), bias=False),
        )
    )
    net.lm_head.weight = net.transformer.wte.weight
    data = torch.tensor([stoi[c] for c in TEXT])
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - T - 1, (16,))
        x = torch.stack([data[s : s + T] for s in starts])
        y = torch.stack([data[s + 1 : s + T + 1] for s in starts])
        h = net.transformer.wte(x) + net.transformer.wpe(torch.arange(T))
        h = net.transformer.ln_f(net.transformer.h[0](h))
        loss = nn.functional.cross_entropy(net.lm_head(h).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"model_args": args, "model": net.state_dict(), "iter_num": steps}, out / "ckpt.pt")
    with open(out / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, f)
    (out / "input.txt").write_text(TEXT)
    print(
        f"{out}: ckpt.pt, meta.pkl and input.txt, {len(chars)} characters, loss {loss.item():.3f}"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/nanogpt-char"))
