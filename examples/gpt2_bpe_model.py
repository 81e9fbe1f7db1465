"""Write a tiny Hugging Face GPT-2 folder with its own byte-level BPE tokenizer: config.json,
model.safetensors, tokenizer.json and the text both learned, input.txt.

A stand-in for a GPT-2 folder `save_pretrained` writes, so `flatformer import` has one to read
from a clean clone without transformers: the tokenizer is trained on the text with the
`tokenizers` library, the model (nanoGPT's block, which is GPT-2's) for a few hundred Adam steps
on its tokens, and the weights are saved under GPT-2's names in its Conv1D layout (in, out),
the lm_head tied to the embedding and left out, as transformers saves it.
Usage: python examples/gpt2_bpe_model.py OUT_FOLDER
"""

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import ByteLevelBPETokenizer
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from nanogpt_char_model import TEXT, Block  # noqa: E402

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def main(out: Path, steps: int = 300):
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator([TEXT], vocab_size=300, min_frequency=2, show_progress=False)
    V, d, T = tokenizer.get_vocab_size(), 16, 16
    wte, wpe, block, ln_f = (
        nn.Embedding(V, d),
        nn.Embedding(T, d),
        Block(d, 2, T, "tanh"),
        nn.LayerNorm(d),
    )
    data = torch.tensor(tokenizer.encode(TEXT).ids)
    params = [*wte.parameters(), *wpe.parameters(), *block.parameters(), *ln_f.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-2)
    for _ in range(steps):
        starts = torch.randint(0, len(data) - T - 1, (16,))
        x = torch.stack([data[s : s + T] for s in starts])
        y = torch.stack([data[s + 1 : s + T + 1] for s in starts])
        h = ln_f(block(wte(x) + wpe(torch.arange(T))))
        loss = nn.functional.cross_entropy((h @ wte.weight.T).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    state = {"wte.weight": wte.weight, "wpe.weight": wpe.weight, "ln_f.weight": ln_f.weight,
             "ln_f.bias": ln_f.bias}  # fmt: skip
    for name, value in block.state_dict().items():
        if name != "mask":
            state[f"h.0.{name}"] = value.T if name.endswith(CONV1D) else value
    out.mkdir(parents=True, exist_ok=True)
    save_file({f"transformer.{k}": v.detach().contiguous() for k, v in state.items()},
              out / "model.safetensors")  # fmt: skip
    config = {"model_type": "gpt2", "vocab_size": V, "n_positions": T, "n_embd": d,
              "n_layer": 1, "n_head": 2, "activation_function": "gelu_new"}  # fmt: skip
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "input.txt").write_text(TEXT)
    print(f"{out}: a GPT-2 folder and input.txt, {V} BPE tokens, loss {loss.item():.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/gpt2-bpe"))
