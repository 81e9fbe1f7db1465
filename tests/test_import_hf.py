"""Hugging Face GPT-2 folders: built with transformers, saved both ways, imported, compared."""

import json

import numpy as np
import pytest
import torch

from flatformer.errors import FlatformerError
from flatformer.importers import hf_gpt2
from flatformer.model.transformer import Transformer


def gpt2(folder, safe: bool, **overrides):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=13,
        n_positions=10,
        n_embd=16,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        **overrides,
    )
    model = GPT2LMHeadModel(config).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    model.save_pretrained(folder, safe_serialization=safe)
    return model


@pytest.mark.parametrize("safe", [True, False])
def test_imported_gpt2_logits_and_greedy_tokens_equal_transformers(tmp_path, safe):
    torch.set_num_threads(1)
    source = gpt2(tmp_path, safe)
    imported = hf_gpt2.read(tmp_path)
    model = Transformer(imported.cfg, imported.tensors)
    tokens = np.random.default_rng(0).integers(0, 13, (4, 10))
    with torch.no_grad():
        expected = source(torch.tensor(tokens)).logits.numpy()
        ours = model(tokens)
        assert np.abs(ours - expected).max() < 1e-9
        greedy = source.generate(
            torch.tensor([[1, 2]]), max_new_tokens=8, do_sample=False, pad_token_id=0
        )[0].tolist()
    seq = [1, 2]
    for _ in range(8):
        seq.append(int(np.argmax(model(np.array([seq]))[0, -1])))
    assert seq == greedy
    assert imported.provenance["format"] == "hf-gpt2"


def test_a_gpt2_with_another_layernorm_epsilon_or_activation_is_refused_by_name(tmp_path):
    gpt2(tmp_path, True, layer_norm_epsilon=1e-6)
    with pytest.raises(FlatformerError, match=r"layer_norm_epsilon = 1e-06"):
        hf_gpt2.read(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.update(layer_norm_epsilon=1e-5, activation_function="quick_gelu")
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(FlatformerError, match=r"activation_function = 'quick_gelu'"):
        hf_gpt2.read(tmp_path)


@pytest.mark.parametrize("act", ["gelu", "relu", "gelu_pytorch_tanh"])
def test_a_gpt2_with_the_engines_other_activations_imports_equal(tmp_path, act):
    torch.set_num_threads(1)
    source = gpt2(tmp_path, True, activation_function=act)
    imported = hf_gpt2.read(tmp_path)
    tokens = np.random.default_rng(0).integers(0, 13, (3, 10))
    with torch.no_grad():
        expected = source(torch.tensor(tokens)).logits.numpy()
    assert np.abs(Transformer(imported.cfg, imported.tensors)(tokens) - expected).max() < 1e-9


def save_word_tokenizer(folder, words):
    """tokenizer.json as the tokenizers library writes it, for a word-level vocabulary."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token=words[0])).save(
        str(folder / "tokenizer.json")
    )


def test_tokens_with_whitespace_are_shown_by_name_and_the_page_opens(tmp_path):
    from flatformer.explorer import render_html
    from flatformer.importers.run import read_source, write_run
    from flatformer.store.runs import load_run

    gpt2(tmp_path, True)
    words = ["<unk>", " ", "\n", "a b", "\tc"] + [f"w{i}" for i in range(8)]
    save_word_tokenizer(tmp_path, words)
    imported, task = read_source(tmp_path, None, None)
    assert task.vocab[:5] == ["<unk>", "␣", "⏎", "a␣b", "⇥c"] and task.vocab[5] == "w0"
    assert any("visible name" in c for c in imported.provenance["changes"])
    assert task.encode_pieces("␣ a␣b w7") == [1, 3, 12]  # names typed space-separated
    assert task.encode("a b") == [3] and task.decode([3]) == "a b"  # text: the tokenizer's
    run = write_run(imported, task, tmp_path / "run")
    assert load_run(run).vocab == task.vocab
    assert json.dumps("a␣b") in render_html(run)  # the page carries the shown names


def test_tokens_alike_once_whitespace_is_shown_are_refused(tmp_path):
    gpt2(tmp_path, True)
    from flatformer.importers.run import read_source

    save_word_tokenizer(tmp_path, [" ", "␣"] + [f"w{i}" for i in range(11)])
    with pytest.raises(FlatformerError, match="two tokens alike"):
        read_source(tmp_path, None, None)
