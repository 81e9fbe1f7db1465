"""nanoGPT checkpoints: a GPT in nanoGPT's layout, retyped here, imported and compared."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from flatformer.errors import FlatformerError
from flatformer.importers import nanogpt
from flatformer.model.transformer import Transformer


class Attention(nn.Module):
    def __init__(self, d, H, T, bias):
        super().__init__()
        self.H = H
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.c_proj = nn.Linear(d, d, bias=bias)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (a.view(B, T, self.H, d // self.H).transpose(1, 2) for a in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.H)  # (B, nh, T, T)
        scores = scores.masked_fill(~self.mask[:T, :T], float("-inf"))
        y = scores.softmax(-1) @ v  # (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, d))


class Block(nn.Module):
    def __init__(self, d, H, T, bias):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, bias=bias)
        self.attn = Attention(d, H, T, bias)
        self.ln_2 = nn.LayerNorm(d, bias=bias)
        self.mlp = nn.ModuleDict(
            dict(c_fc=nn.Linear(d, 4 * d, bias=bias), c_proj=nn.Linear(4 * d, d, bias=bias))
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(nn.functional.gelu(self.mlp.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, n_layer, n_head, n_embd, block_size, vocab_size, bias):
        super().__init__()
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                h=nn.ModuleList([Block(n_embd, n_head, block_size, bias) for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd, bias=bias),
            )
        )
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, idx):
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(idx.shape[1]))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def make(bias, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    args = dict(
        n_layer=2, n_head=2, n_embd=16, block_size=12, vocab_size=11, bias=bias, dropout=0.0
    )
    gpt = GPT(**{k: v for k, v in args.items() if k != "dropout"}).to(dtype)
    with torch.no_grad():  # move LayerNorm gains and biases off 1 and 0 so they matter
        for name, p in gpt.named_parameters():
            if "ln" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    return gpt, args


def greedy(step, tokens, n):
    tokens = list(tokens)
    for _ in range(n):
        tokens.append(int(np.argmax(step(np.array([tokens[-12:]]))[0, -1])))
    return tokens


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("compiled_prefix", [False, True])
def test_imported_nanogpt_logits_and_greedy_tokens_equal_the_source(
    tmp_path, bias, compiled_prefix
):
    torch.set_num_threads(1)
    gpt, args = make(bias)
    state = gpt.state_dict()
    if compiled_prefix:
        state = {"_orig_mod." + k: v for k, v in state.items()}
    torch.save({"model_args": args, "model": state, "iter_num": 5}, tmp_path / "ckpt.pt")
    imported = nanogpt.read(tmp_path / "ckpt.pt")
    model = Transformer(imported.cfg, imported.tensors)
    tokens = np.random.default_rng(0).integers(0, 11, (5, 12))
    with torch.no_grad():
        expected = gpt(torch.tensor(tokens)).numpy()
        source_step = lambda t: gpt(torch.tensor(t)).detach().numpy()  # noqa: E731
    assert np.abs(model(tokens) - expected).max() < 1e-9
    assert greedy(model, [1, 2], 15) == greedy(source_step, [1, 2], 15)
    assert imported.provenance["format"] == "nanogpt"
    assert len(imported.provenance["sha256"]) == 64
    assert any("tied" in c for c in imported.provenance["changes"])
    assert any("zero biases" in c for c in imported.provenance["changes"]) == (not bias)


def test_a_float32_nanogpt_stays_float32_and_agrees_to_1e_5(tmp_path):
    gpt, args = make(True, torch.float32)
    torch.save({"model_args": args, "model": gpt.state_dict()}, tmp_path / "ckpt.pt")
    imported = nanogpt.read(tmp_path / "ckpt.pt")
    assert all(t.dtype == np.float32 for t in imported.tensors.values())
    tokens = np.random.default_rng(1).integers(0, 11, (4, 12))
    model = Transformer(
        imported.cfg, {k: v.astype(np.float64) for k, v in imported.tensors.items()}
    )
    with torch.no_grad():
        expected = gpt(torch.tensor(tokens)).numpy()
    assert np.abs(model(tokens) - expected).max() < 1e-5


def test_a_checkpoint_that_needs_code_to_load_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("ran",))

    torch.save({"model_args": {}, "model": {}, "x": Evil()}, tmp_path / "ckpt.pt")
    with pytest.raises(FlatformerError, match="weights-only"):
        nanogpt.read(tmp_path / "ckpt.pt")


def write_source(folder, chars="abcdefghi \n"):
    import pickle

    gpt, args = make(True)
    torch.save({"model_args": args, "model": gpt.state_dict()}, folder / "ckpt.pt")
    with open(folder / "meta.pkl", "wb") as f:
        pickle.dump(
            {
                "vocab_size": 11,
                "itos": dict(enumerate(chars)),
                "stoi": {c: i for i, c in enumerate(chars)},
            },
            f,
        )
    return gpt


def test_import_writes_a_run_whose_model_and_task_are_the_source(tmp_path):
    from flatformer.importers.run import read_source, write_run
    from flatformer.store.runs import load_run

    gpt = write_source(tmp_path)
    write_run(*read_source(tmp_path / "ckpt.pt", None, tmp_path / "meta.pkl"), tmp_path / "run")
    run = load_run(tmp_path / "run")
    assert run.task.encode("ab c\n") == [0, 1, 9, 2, 10] and run.task.decode([8, 9, 10]) == "i \n"
    assert run.config["imported"]["format"] == "nanogpt"
    tokens = np.random.default_rng(2).integers(0, 11, (3, 12))
    with torch.no_grad():
        assert np.abs(run.model()(tokens) - gpt(torch.tensor(tokens)).numpy()).max() < 1e-9
    ids = read_source(tmp_path / "ckpt.pt", None, None)[1]
    assert ids.vocab[:3] == ["0", "1", "2"] and ids.encode("3 1") == [3, 1]


class Gadget:
    pass


def test_a_meta_pkl_naming_any_class_is_refused(tmp_path):
    import pickle

    from flatformer.importers.vocab import read_meta

    with open(tmp_path / "meta.pkl", "wb") as f:
        pickle.dump({"itos": {0: "a", 1: "b"}, "extra": Gadget()}, f)
    with pytest.raises(FlatformerError, match="only plain dicts"):
        read_meta(tmp_path / "meta.pkl")
