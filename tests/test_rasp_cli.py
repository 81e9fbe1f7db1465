"""`flatformer compile`: a program file to a checked run folder, or one line and exit 2."""

import itertools
import json

import numpy as np

from clitools import assert_one_line_error, cli_here

from flatformer import rasp
from flatformer.rasp import library
from flatformer.rasp.compile import compile_rasp_to_model
from flatformer.store.runs import load_run

SHIFT = """
from flatformer import rasp
later = rasp.Select(rasp.indices, rasp.indices, lambda key, query: key == query + 2)
program = rasp.Aggregate(later, rasp.tokens).named("shift")
"""


def test_compile_writes_a_run_with_its_ground_truth(tmp_path):
    source = tmp_path / "shift.py"
    source.write_text(SHIFT)
    result = cli_here(
        "compile", source, "--vocab", "0,1,2,3", "--max-len", "4", "--out", tmp_path / "run"
    )
    assert result.returncode == 0, result.stderr
    assert "every input (340 checked)" in result.stdout
    run = load_run(tmp_path / "run")
    assert run.config["vocab"] == ["BOS", "0", "1", "2", "3"] and run.cfg.causal is False
    truth = json.loads((tmp_path / "run" / "config.json").read_text())["imported"]["rasp"]
    assert truth["classes"] == ["0", "1", "2", "3", "None"]
    assert truth["heads"] == {"blocks.0.attn.0": "shift"}
    assert "shift:None" in truth["residual"] and truth["validation"]["mismatches"] == 0
    logits = run.model()([0, 3, 2, 1, 4])[0]
    assert [truth["classes"][c] for c in logits[1:].argmax(-1)] == [
        "0",
        "3",
        "None",
        "None",
    ]  # input 2 1 0 3


BAD = {
    "cycle": (
        "from flatformer import rasp\na = rasp.Map(lambda x: x + 1, rasp.tokens)\n"
        "program = rasp.Map(lambda x: x, a, simplify=False)\na.inner = program\n",
        "cycle",
    ),
    "unknown": (
        "from flatformer import rasp\nprogram = rasp.ConstantSOp([1]) + rasp.tokens\n",
        "ConstantSOp",
    ),
    "wide": (
        "from flatformer import rasp\nprogram = rasp.Aggregate(rasp.Select(rasp.indices, "
        "rasp.indices, rasp.Comparison.LEQ), rasp.tokens)\n",
        "selects 2 keys of different values",
    ),
    "not an S-op": ("program = 3\n", "not a RASP S-op"),
}


def test_bad_programs_get_one_line_and_exit_2(tmp_path):
    for name, (text, words) in BAD.items():
        source = tmp_path / f"{name.replace(' ', '_')}.py"
        source.write_text(text)
        result = cli_here(
            "compile", source, "--vocab", "1,2", "--max-len", "3", "--out", tmp_path / "r"
        )
        assert_one_line_error(result, words)
        assert result.returncode == 2
    assert not (tmp_path / "r").exists()
    source = tmp_path / "shift.py"
    source.write_text(SHIFT)
    huge = ",".join(map(str, range(1100)))
    too_big = cli_here(
        "compile", source, "--vocab", huge, "--max-len", "3", "--out", tmp_path / "r"
    )
    assert_one_line_error(too_big, "d_model", "limit of 1024")


def test_training_refuses_attention_both_ways_and_explore_opens_a_compiled_run(tmp_path):
    source = tmp_path / "shift.py"
    source.write_text(SHIFT)
    cli_here("compile", source, "--vocab", "0,1", "--max-len", "3", "--out", tmp_path / "run")
    explore = cli_here("explore", tmp_path / "run", "--out", tmp_path / "page.html")
    assert explore.returncode == 0, explore.stderr
    assert "works offline" in explore.stdout and (tmp_path / "page.html").stat().st_size > 0
    train = cli_here("train", "plus-last-even", "--set", "causal=false", "--out", tmp_path / "t")
    assert_one_line_error(train, "training (next-token prediction) computes causal attention only")
    numpy = cli_here(
        "train",
        "plus-last-even",
        "--set",
        "causal=false",
        "--engine",
        "numpy",
        "--out",
        tmp_path / "t",
    )
    assert_one_line_error(numpy, "training (next-token prediction) computes causal attention only")


def test_a_compiled_run_records_its_circuit_and_circuits_scores_against_it(tmp_path):
    """The shift program reads the token two places on: its head's query and key read the
    indices (pos) and the always-on direction (tok), its value the tokens, and it writes the
    logits. Every method is scored against that circuit; targets name the program's values."""
    source = tmp_path / "shift.py"
    source.write_text(SHIFT)
    cli_here("compile", source, "--vocab", "0,1,2,3", "--max-len", "4", "--out", tmp_path / "run")
    known = load_run(tmp_path / "run").config["imported"]["circuit"]
    assert known["source"] == "compiled program"
    assert sorted(map(tuple, known["edges"])) == [
        ("a0.0", "logits"),
        ("pos", "a0.0.k"),
        ("pos", "a0.0.q"),
        ("tok", "a0.0.k"),
        ("tok", "a0.0.q"),
        ("tok", "a0.0.v"),
    ]
    # position 2 reads the last token (index 4); the two before it read past the end (None)
    lines = [
        json.dumps({"prompt": "BOS " + " ".join(map(str, xs)), "target": "None"})
        for xs in ((0, 1, 2, 3), (3, 2, 1, 0), (1, 1, 3, 0))
    ]
    (tmp_path / "ex.jsonl").write_text("\n".join(lines))
    args = ("circuits", tmp_path / "run", "--prompts", tmp_path / "ex.jsonl", "--ablation", "zero")
    made = cli_here(*args, "--json")
    assert made.returncode == 0, made.stderr
    scored = json.loads(made.stdout)["known_circuit"]
    assert scored["edges"] == 6 and set(scored["methods"]) == {"exact", "eap", "eap_ig", "acdc"}
    (tmp_path / "bad.jsonl").write_text(json.dumps({"prompt": "BOS 0 1 2 3", "target": "7"}))
    bad = cli_here("circuits", tmp_path / "run", "--prompts", tmp_path / "bad.jsonl")
    assert_one_line_error(bad, "target must be one of the model's outputs (0, 1, 2, 3, None)")


REVERSE = """
from flatformer import rasp
from flatformer.rasp import library
program = library.make_reverse(rasp.tokens)
"""


def test_acdc_recovers_the_compiled_reverse_circuit_as_conmy_et_al_read_it(tmp_path):
    """ACDC's Table 3 set-up (Conmy et al. 2023): reverse compiled for inputs of up to 5 values,
    read on the permutations of 1, 2, 3 at every position, zero ablation, the L2 metric. The
    known circuit is the wired edges that are live: the always-true selector's query and key,
    and the `bos` direction into the MLPs, are wired but change no output anywhere."""
    source = tmp_path / "reverse.py"
    source.write_text(REVERSE)
    cli_here("compile", source, "--vocab", "1,2,3", "--max-len", "5", "--out", tmp_path / "run")
    known = load_run(tmp_path / "run").config["imported"]["circuit"]
    live, wired = set(map(tuple, known["edges"])), set(map(tuple, known["wired"]))
    assert live < wired and len(live) == 9 and len(wired) == 16
    assert {("tok", "a0.0.q"), ("tok", "a0.0.k"), ("tok", "m0")} <= wired - live
    assert {("a0.0", "m0"), ("m2", "a3.0.q"), ("pos", "a3.0.k"), ("a3.0", "logits")} <= live
    assert known["live_on"] == {"inputs": 363, "exhaustive": True}
    lines = [
        json.dumps({"prompt": "BOS " + " ".join(map(str, xs)), "target": str(xs[0])})
        for xs in itertools.permutations((1, 2, 3))
    ]
    (tmp_path / "perms.jsonl").write_text("\n".join(lines))
    made = cli_here(
        "circuits",
        tmp_path / "run",
        "--prompts",
        tmp_path / "perms.jsonl",
        "--ablation",
        "zero",
        "--metric",
        "l2",
        "--positions",
        "all",
        "--json",
    )
    assert made.returncode == 0, made.stderr
    report = json.loads(made.stdout)
    assert report["prompts"] == 6 and report["readouts"] == 18
    acdc = report["known_circuit"]["methods"]["acdc"]
    assert acdc["auc"] == 1.0 and acdc["precision"] == 1.0 and acdc["recall"] == 1.0
    # L2's gradient vanishes at the clean model: EAP cannot rank anything
    assert report["known_circuit"]["methods"]["eap"]["auc"] == 0.5
    bad = cli_here(
        "circuits", tmp_path / "run", "--prompts", tmp_path / "perms.jsonl", "--positions", "every"
    )
    assert_one_line_error(bad, "--positions must be last or all")


def test_compress_records_its_map_and_states_its_accuracy(tmp_path):
    source = tmp_path / "reverse.py"
    source.write_text(REVERSE)
    out = tmp_path / "small"
    made = cli_here(
        "compile",
        source,
        "--vocab",
        "1,2,3",
        "--max-len",
        "3",
        "--out",
        out,
        "--compress",
        "12",
        "--compress-steps",
        "5",
    )
    assert made.returncode == 0, made.stderr
    assert "compressed to d_model 12" in made.stdout and "of inputs" in made.stdout
    run = load_run(out)
    record = run.config["imported"]["compression"]
    directions = np.array(record["directions"])
    residual = run.config["imported"]["rasp"]["residual"]
    assert run.cfg.d_model == 12 and directions.shape == (len(residual), 12)
    assert record["from"] == len(residual) and 0 <= record["position_accuracy"] <= 1
    assert record["validation"]["checked"] == 39
    # every writer writes through the map, every reader reads through its transpose
    original = compile_rasp_to_model(library.make_reverse(rasp.tokens), [1, 2, 3], 3).tensors
    tensors = run.model().tensors
    np.testing.assert_allclose(tensors["embed.W_E"], original["embed.W_E"] @ directions, atol=1e-12)
    np.testing.assert_allclose(
        tensors["unembed.W_U"], directions.T @ original["unembed.W_U"], atol=1e-12
    )
    too_wide = cli_here(
        "compile",
        source,
        "--vocab",
        "1,2,3",
        "--max-len",
        "3",
        "--out",
        tmp_path / "x",
        "--compress",
        "500",
    )
    assert_one_line_error(too_wide, "--compress takes a width from 1 to")


def test_generate_reads_a_compiled_program_at_every_position(tmp_path):
    """Its outputs are the program's values, not tokens to feed back: one pass, one value per
    input; BOS is put first when the prompt leaves it out."""
    source = tmp_path / "reverse.py"
    source.write_text(REVERSE)
    cli_here("compile", source, "--vocab", "1,2,3", "--max-len", "4", "--out", tmp_path / "run")
    for prompt in ("BOS 1 2 3", "1 2 3"):
        made = cli_here("generate", tmp_path / "run", "--prompt", prompt, "--json")
        assert made.returncode == 0, made.stderr
        assert json.loads(made.stdout) == {"prompt": "BOS 1 2 3", "outputs": ["3", "2", "1"]}
    long = cli_here("generate", tmp_path / "run", "--prompt", "1 2 3 1 2")
    assert_one_line_error(long, "--prompt has 6 tokens; the model reads 5")
