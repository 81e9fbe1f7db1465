"""A GPT-2 folder with its own byte-level BPE tokenizer, trained here with the `tokenizers`
library: prompts, corpora, prompts files and the page take text, `generate` prints what the
Hugging Face tokenizer decodes, and vocab.json with merges.txt reads as tokenizer.json does."""

import json
import shutil

import pytest
import torch
from clitools import assert_one_line_error, cli_here

TEXT = (
    "the cat sat on the mat. the dog sat on the log. the cat saw the dog. "
    "the dog saw the cat. a cat and a dog sat on a mat and a log. "
) * 8
N_CTX = 32


def train_tokenizer():
    """GPT-2's kind: byte-level BPE over all 256 bytes, so any text encodes."""
    from tokenizers import ByteLevelBPETokenizer

    tokenizer = ByteLevelBPETokenizer()
    tokenizer.train_from_iterator([TEXT], vocab_size=300, min_frequency=2, show_progress=False)
    return tokenizer


def small_tokenizer():
    """Byte-level BPE over the bytes TEXT has (37 tokens): the figures label every token, and
    GPT-2's 256-byte alphabet alone costs them minutes here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=60, min_frequency=2, show_progress=False)
    tokenizer.train_from_iterator([TEXT], trainer)
    return tokenizer


def write_gpt2(folder, vocab_size):
    """A random GPT-2 of `vocab_size` embedding rows saved by transformers, its LayerNorms and
    biases moved off 1 and 0 so they matter."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=vocab_size, n_positions=N_CTX, n_embd=16, n_layer=2,
                        n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    model = GPT2LMHeadModel(config).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "ln" in name or name.endswith("bias"):
                p.add_(0.3 * torch.randn_like(p))
    model.save_pretrained(folder, safe_serialization=True)
    return model


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(folder with tokenizer.json, the transformers model, its fast tokenizer, the run)."""
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("gpt2-bpe")
    tokenizer = small_tokenizer()
    model = write_gpt2(folder, tokenizer.get_vocab_size())
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "input.txt").write_text(TEXT)
    made = cli_here("import", folder, "--corpus", folder / "input.txt", "--out", folder / "run")
    assert made.returncode == 0, made.stderr
    assert "(its tokenizer, text)" in made.stdout
    hf = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    return folder, model, hf, folder / "run"


def as_json(*args):
    result = cli_here(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_generate_prints_the_text_the_tokenizer_decodes_from_the_sources_greedy_ids(source):
    folder, model, hf, run = source
    prompt = "the dog sat on"
    ids = hf(prompt)["input_ids"]
    assert len(ids) == 4  # pieces, not characters: Ġdog Ġsat Ġon
    with torch.no_grad():
        greedy = model.generate(
            torch.tensor([ids]), max_new_tokens=10, do_sample=False, pad_token_id=0
        )[0, len(ids) :].tolist()
    report = as_json("generate", run, "--prompt", prompt, "--greedy", "-n", "10")
    assert report["tokens"] == greedy
    assert report["prompt"] == prompt and report["generated"] == hf.decode(greedy)
    shown = cli_here("generate", run, "--prompt", prompt, "--greedy", "-n", "10")
    assert hf.decode(greedy) in shown.stdout and "Ġ" not in shown.stdout
    pieces = as_json("generate", run, "--prompt", "the Ġdog Ġsat Ġon", "--pieces", "--greedy",
                     "-n", "10")  # fmt: skip
    assert pieces["tokens"] == greedy
    assert pieces["generated"] == " ".join(hf.convert_ids_to_tokens(greedy))


def test_circuits_read_a_prompts_file_of_text(source, tmp_path):
    _, _, hf, run = source
    rows = [
        {"prompt": "the cat sat on the", "target": " mat", "corrupt": "the dog sat on the",
         "corrupt_target": " log"},
        {"prompt": "a cat sat on a", "target": " mat", "corrupt": "a dog sat on a",
         "corrupt_target": " log"},
    ]  # fmt: skip
    for row in rows:  # one piece for each animal and each target, so the prompts align
        assert len(hf(row["prompt"])["input_ids"]) == len(hf(row["corrupt"])["input_ids"])
        assert len(hf(row["target"])["input_ids"]) == 1
    (tmp_path / "ex.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = as_json("circuits", run, "--prompts", tmp_path / "ex.jsonl", "--ablation", "resample")
    assert report["prompts"] == 2
    assert 1 <= report["circuit"]["edges_kept"] <= report["circuit"]["edges_total"]


def test_figures_draw_on_the_held_out_text(source, tmp_path):
    _, _, _, run = source
    config = json.loads((run / "config.json").read_text())
    assert config["imported_task"]["text"] == TEXT  # a raw text, tokenized and kept whole
    made = cli_here("figures", run, "--only", "fig05", "--jobs", "1", "--out", tmp_path)
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "fig05_embeddings.png").stat().st_size > 5000


def test_the_page_opens_on_a_text_prompt_and_says_how_its_box_reads(source, tmp_path):
    from flatformer.explorer.export import export_run

    _, _, hf, run = source
    data = export_run(run, max_checkpoints=1, prompt="the cat saw the dog")
    assert data["demo"] == hf("the cat saw the dog")["input_ids"]
    assert "--prompt" in data["input_note"]
    assert export_run(run, max_checkpoints=1)["demo"] == hf(TEXT)["input_ids"][:8]
    made = cli_here("explore", run, "--prompt", "the cat", "--out", tmp_path / "page.html")
    assert made.returncode == 0, made.stderr
    page = (tmp_path / "page.html").read_text()
    assert json.dumps(hf.convert_ids_to_tokens(hf("the cat")["input_ids"])[1]) in page


def test_vocab_json_with_merges_txt_tokenizes_as_tokenizer_json(tmp_path):
    from transformers import PreTrainedTokenizerFast

    from flatformer.importers.run import read_source

    tokenizer = train_tokenizer()
    write_gpt2(tmp_path / "two", tokenizer.get_vocab_size())
    tokenizer.save_model(str(tmp_path / "two"))  # vocab.json and merges.txt
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    hf = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    _, task = read_source(tmp_path / "two", None, None)
    for text in ("the dog sat on the log.", "  naïve café ☃\n\tcat", TEXT[:200]):
        ids = task.encode(text)
        assert ids == hf(text)["input_ids"]
        assert task.decode(ids) == text
    (tmp_path / "two" / "merges.txt").unlink()
    made = cli_here("import", tmp_path / "two", "--out", tmp_path / "run")
    assert_one_line_error(made, "merges.txt")


def test_a_padded_vocabulary_imports_with_its_extra_rows_named_unused(tmp_path):
    tokenizer = small_tokenizer()
    n = tokenizer.get_vocab_size()
    write_gpt2(tmp_path, n + 5)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    made = cli_here("import", tmp_path, "--out", tmp_path / "run")
    assert made.returncode == 0, made.stderr
    assert "5 rows unused" in made.stdout and f"<unused {n}>" in made.stdout
    from flatformer.store.runs import load_run

    task = load_run(tmp_path / "run").task
    assert task.vocab[n:] == [f"<unused {i}>" for i in range(n, n + 5)]
    assert max(task.encode(TEXT)) < n
    assert task.decode([task.encode("the cat")[0], n + 2]) == f"the<unused {n + 2}>"
    report = as_json("generate", tmp_path / "run", "--prompt", "the cat", "-n", "5")
    assert len(report["tokens"]) == 5


def test_a_tokenizer_larger_than_the_embedding_is_refused_in_one_line(tmp_path):
    tokenizer = small_tokenizer()
    write_gpt2(tmp_path, tokenizer.get_vocab_size() - 1)
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    assert_one_line_error(
        cli_here("import", tmp_path, "--out", tmp_path / "run"), "tokens", "embedding has"
    )


def test_a_raw_text_for_a_model_of_ids_is_refused_in_a_short_line(tmp_path):
    write_gpt2(tmp_path, 13)
    (tmp_path / "raw.txt").write_text("01 " * 20_000)
    made = cli_here("import", tmp_path, "--corpus", tmp_path / "raw.txt", "--out", tmp_path / "r")
    # Nothing of the file is quoted (it may be one never meant to be shown), and it says what
    # the model reads instead.
    assert_one_line_error(made, "outside the model's vocabulary", "ids 0 to 12 separated by spaces")
    assert "01" not in made.stderr and len(made.stderr) < 600


def test_the_page_checks_itself_and_its_input_box_reads_the_pieces(chromium, source, tmp_path):
    from flatformer.explorer import page_html
    from flatformer.explorer.export import export_run
    from test_explorer_browser import state, visit

    _, _, hf, run = source
    page = tmp_path / "page.html"
    page.write_text(page_html(export_run(run, prompt="the cat sat on the")), encoding="utf-8")
    with visit(chromium, page) as p:
        check = p.evaluate("explorer.selfCheck")
        assert check["ok"] and check["worst"] < 1e-9
        assert state(p)["seq"] == hf("the cat sat on the")["input_ids"]
        assert "--prompt" in p.inner_text("#seq-note")
        p.fill("#seq-text", "the Ġdog Ġsat")
        p.press("#seq-text", "Enter")
        assert state(p)["seq"] == hf("the dog sat")["input_ids"]


def test_a_target_of_two_pieces_is_refused_naming_them(source, tmp_path):
    _, _, _, run = source
    row = {"prompt": "the cat sat on the", "target": " mat."}
    (tmp_path / "ex.jsonl").write_text(json.dumps(row) + "\n")
    made = cli_here("circuits", run, "--prompts", tmp_path / "ex.jsonl", "--ablation", "zero")
    assert_one_line_error(made, "exactly one token, got 2 (Ġmat .)")


def test_a_run_whose_kept_tokenizer_is_damaged_says_so_in_one_line(source, tmp_path):
    _, _, _, run = source
    shutil.copytree(run, tmp_path / "run")
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    config["imported_task"]["tokenizer_json"] = config["imported_task"]["tokenizer_json"][:-40]
    (tmp_path / "run" / "config.json").write_text(json.dumps(config))
    made = cli_here("generate", tmp_path / "run", "--prompt", "the cat")
    assert_one_line_error(made, "not a tokenizer the tokenizers library reads")
