"""A prompts file written by a task gives the task's own circuit; hostile files, one line each."""

import json

import numpy as np
import pytest
import torch

from flatformer.edges.report import circuits_report
from flatformer.errors import FlatformerError
from flatformer.tasks.prompts import read_examples, task_examples
from flatformer.store.runs import load_run

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def written(paper_run, tmp_path_factory):
    run = load_run(paper_run)
    path = tmp_path_factory.mktemp("prompts") / "p.jsonl"
    rows = task_examples(run.task, run.data(), 40)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run, path


@pytest.mark.parametrize("ablation", ["mean", "resample"])
def test_circuit_from_prompts_equals_task(written, ablation):
    run, path = written
    examples = read_examples(path, run.task, run.cfg.n_ctx)
    args = (run, None, ablation, None, ["exact"], 40, 0.95, None, 5)
    a = circuits_report(*args)
    b = circuits_report(*args, examples=examples)
    assert a["circuit"]["edges"] == b["circuit"]["edges"]
    assert a["prompts"] == b["prompts"] == 40
    assert abs(a["clean_metric"] - b["clean_metric"]) < 1e-12
    ea = np.array([e["exact"] for e in a["edges"]])
    eb = np.array([e["exact"] for e in b["edges"]])
    assert [(e["src"], e["dst"]) for e in a["edges"]] == [(e["src"], e["dst"]) for e in b["edges"]]
    assert np.abs(ea - eb).max() < 1e-12


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "no examples"),
        ('{"prompt": "1 +", "target": "2"}\nnot json\n', "line 2 is not valid JSON"),
        ('{"prompt": "1 +"}\n', "line 1: needs"),
        ('{"prompt": "1 zz", "target": "2"}\n', "line 1: prompt"),
        ('{"prompt": "1 +", "target": "2 4"}\n', "exactly one token"),
        ('{"prompt": "' + " ".join(["1"] * 9) + '", "target": "2"}\n', "9 tokens"),
        ('{"prompt": 3, "target": "2"}\n', "must be a string"),
        ('{"prompt": "1 +", "target": "2", "corrupt": "1"}\n', "must align"),
        ("[1, 2]\n", "line 1: needs"),
    ],
)
def test_hostile_prompts_one_line(written, tmp_path, text, words):
    run, _ = written
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(FlatformerError) as err:
        read_examples(path, run.task, run.cfg.n_ctx)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_circuits_command_refuses_bad_file_in_one_line(paper_run, tmp_path):
    from clitools import assert_one_line_error, cli

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1 +", "target": "2"}\n{oops\n')
    assert_one_line_error(cli("circuits", paper_run, "--prompts", bad), "prompts line 2")


def test_analyze_reads_a_prompts_file_and_finds_the_tasks_own_circuit(paper_run, tmp_path):
    """`analyze --prompts FILE` with the task's examples (the 200 held-out windows analyze
    measures by default) finds the circuit analyze finds from the task; a plain prompts file
    still sets the knobs' prompts."""
    from clitools import cli_here

    run = load_run(paper_run)
    rows = task_examples(run.task, run.data(), 200)
    (tmp_path / "task.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "plain.txt").write_text("".join(r["prompt"] + "\n" for r in rows[:5]))

    def report(*extra):
        made = cli_here("analyze", paper_run, "--json", *extra)
        assert made.returncode == 0, made.stderr
        return json.loads(made.stdout)

    task, given, plain = (
        report(),
        report("--prompts", tmp_path / "task.jsonl"),
        report("--prompts", tmp_path / "plain.txt"),
    )
    a, b = task["edge_circuit"], given["edge_circuit"]
    assert a["metric"] == b["metric"] == "logprob"
    assert a["circuit"]["edges"] == b["circuit"]["edges"]
    assert abs(a["circuit"]["faithfulness"] - b["circuit"]["faithfulness"]) < 1e-9
    assert a["prompts"] == b["prompts"] == 200
    assert abs(a["clean_metric"] - b["clean_metric"]) < 1e-9
    (tmp_path / "few.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:7]))
    assert report("--prompts", tmp_path / "few.jsonl")["edge_circuit"]["prompts"] == 7
    assert given["prompts"]["count"] == 200 and given["prompts"]["text"][0] == rows[0]["prompt"]
    assert plain["prompts"]["count"] == 5 and plain["prompts"]["source"].startswith("from ")
    assert "patching" not in plain
    restored = np.array(given["patching"]["restored"], dtype=float)
    final = restored[-1][~np.isnan(restored[-1])]
    assert len(final) and np.allclose(final[-1], 1.0)  # the clean stream at the read position
