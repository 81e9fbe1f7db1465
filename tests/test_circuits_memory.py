"""`circuits` estimates its memory before the model reads a prompt, as `train` does, and
refuses what the machine does not have with the number of prompts that fits."""

import json

import pytest
from clitools import assert_one_line_error, cli_here

from flatformer.store import resources
from flatformer.edges.methods import prompt_bytes
from flatformer.store.runs import load_run

GB = 10**9


@pytest.fixture
def one_gb(monkeypatch):
    monkeypatch.setattr(resources, "available_memory", lambda: GB)


def test_sixty_thousand_prompts_are_refused_before_they_are_read(paper_run, tmp_path, one_gb):
    line = {"prompt": "5 6 5 3 8 9 2 +", "target": "2"}
    (tmp_path / "p.jsonl").write_text((json.dumps(line) + "\n") * 60_000)
    result = cli_here("circuits", paper_run, "--prompts", tmp_path / "p.jsonl")
    per_prompt = prompt_bytes(load_run(paper_run).cfg, 8)
    fit = (GB - resources.BASE_MEMORY) // per_prompt
    assert_one_line_error(result, "60,000 prompts", "1.0 GB available", f"at most {fit:,}")


def test_the_prompts_that_fit_are_accepted_as_printed(paper_run, monkeypatch):
    per_prompt = prompt_bytes(load_run(paper_run).cfg, 8)
    memory = resources.BASE_MEMORY + 50 * per_prompt + 1
    monkeypatch.setattr(resources, "available_memory", lambda: memory)
    refused = cli_here("circuits", paper_run, "--prompts", "200", "--methods", "exact")
    assert_one_line_error(refused, "200 prompts", "--prompts 50 would fit")
    suggestion = refused.stderr.split("; ")[-1].split(" would fit")[0].split()
    accepted = cli_here("circuits", paper_run, *suggestion, "--methods", "exact", "--json")
    assert accepted.returncode == 0, accepted.stderr
    assert json.loads(accepted.stdout)["prompts"] == 50
