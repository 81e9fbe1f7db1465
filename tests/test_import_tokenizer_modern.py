"""Llama's and Qwen2's tokenizers as their folders ship them (tokenizer.json), built here with
the `tokenizers` library: Llama's SentencePiece-style BPE (pieces marked with "▁", bytes as
<0xNN> fallbacks, <s> and </s>) and Qwen2's byte-level BPE, each beside a small model of its
family saved by transformers; `flatformer import` keeps it and `generate` reads and prints
text, equal to transformers' greedy ids and its tokenizer's decoding."""

import json

import pytest
import torch
from clitools import cli_here
from test_import_hf_modern import float64_internals

TEXT = (
    "the cat sat on the mat. the dog sat on the log. the cat saw the dog. "
    "a cat and a dog sat on a mat and a log. "
) * 8


def llama_tokenizer():
    """Llama's kind: Metaspace pieces ("▁the"), byte fallback, <unk> <s> </s> first."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
    )
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="▁", prepend_scheme="never", split=False
    )
    tokenizer.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    trainer = trainers.BpeTrainer(
        vocab_size=80,
        min_frequency=2,
        special_tokens=["<unk>", "<s>", "</s>"],
        show_progress=False,
    )
    tokenizer.train_from_iterator([TEXT], trainer)
    return tokenizer


def qwen_tokenizer():
    """Qwen2's kind: byte-level BPE with its end-of-text token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=70, min_frequency=2, special_tokens=["<|endoftext|>"], show_progress=False
    )
    tokenizer.train_from_iterator([TEXT], trainer)
    return tokenizer


def model_of(kind, vocab_size):
    import transformers as tf

    torch.manual_seed(0)
    sizes = dict(
        vocab_size=vocab_size,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=32,
        initializer_range=0.3,
    )
    if kind == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**sizes)).double().eval()
    return tf.Qwen2ForCausalLM(tf.Qwen2Config(**sizes)).double().eval()


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_generate_reads_and_prints_text_as_the_sources_tokenizer_does(tmp_path, kind):
    from transformers import PreTrainedTokenizerFast

    torch.set_num_threads(1)
    tokenizer = llama_tokenizer() if kind == "llama" else qwen_tokenizer()
    model = float64_internals(model_of(kind, tokenizer.get_vocab_size()))
    model.save_pretrained(tmp_path)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    made = cli_here("import", tmp_path, "--out", tmp_path / "run")
    assert made.returncode == 0, made.stderr
    assert "(its tokenizer, text)" in made.stdout
    hf = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    prompt = "the dog sat on"
    ids = hf(prompt)["input_ids"]
    assert len(ids) < len(prompt)  # pieces, not characters
    model.generation_config.eos_token_id = None  # all 8 tokens, as generate -n 8 gives
    with torch.no_grad():
        greedy = model.generate(
            torch.tensor([ids]), max_new_tokens=8, do_sample=False, pad_token_id=0
        )[0, len(ids) :].tolist()
    report = cli_here(
        "generate", tmp_path / "run", "--prompt", prompt, "--greedy", "-n", "8", "--json"
    )
    assert report.returncode == 0, report.stderr
    report = json.loads(report.stdout)
    assert report["tokens"] == greedy
    assert report["generated"] == hf.decode(greedy)
    marks = "▁" if kind == "llama" else "Ġ"
    shown = cli_here("generate", tmp_path / "run", "--prompt", prompt, "--greedy", "-n", "8")
    assert hf.decode(greedy) in shown.stdout and marks not in shown.stdout
