"""Every suggestion a refusal prints is itself accepted (issue 32): each case is refused in one
line, the suggestion is read out of that line exactly as printed, and the command run with it
succeeds, with nothing written outside the folders it names (test_hostile_runs' world)."""

import re
import shutil

import pytest

from test_hostile_runs import STEP, run_case, world  # noqa: F401 (world is a fixture)


def did_you_mean(args, line):
    """The word refused replaced by the one suggested: "'WORD' (did you mean NEAR?)"."""
    word, near = re.search(r"'([^']+)' \(did you mean ([^?]+)\?\)", line).groups()
    return [near if a == word else a.replace(f"{word}=", f"{near}=") for a in args]


def quoted_prompt(args, line):
    near = re.search(r'did you mean "([^"]+)"\?', line).group(1)
    return [*args[:-1], near]


def run_folder_and_step(args, line):
    folder, step = re.search(r"pass its run folder, (\S+) \((--step \d+) picks", line).groups()
    return [args[0], folder, *step.split()]


def try_folder(args, line):
    return [args[0], re.search(r"try (\S+)\)", line).group(1)]


def example_out(args, line):
    return [*args[:-1], re.search(r"e\.g\. (\S+)$", line).group(1)]


TRAIN = ["train", "plus-last-even", "--steps", "20"]
CASES = [  # (arguments refused, words of the line, the arguments with the suggestion)
    (["train", "plus-last-evn", "--steps", "20", "--out", "a"], ["did you mean"], did_you_mean),
    ([*TRAIN, "--preset", "paper-2", "--out", "a"], ["did you mean"], did_you_mean),
    ([*TRAIN, "--set", "lrr=3e-3", "--out", "a"], ["did you mean lr"], did_you_mean),
    (["generate", "RUN", "-n", "2", "--prompt", "41+46"], ["did you mean"], quoted_prompt),
    (["eval", f"RUN/{STEP}"], ["--step 20000"], run_folder_and_step),
    (["eval", "SEEDS"], ["try"], try_folder),
    ([*TRAIN, "--out", "/"], ["root", "e.g."], example_out),
]


@pytest.mark.parametrize("args, words, suggested", CASES, ids=range(len(CASES)))
def test_a_printed_suggestion_is_accepted(world, args, words, suggested):  # noqa: F811
    seeds = world / "SEEDS" / "seed_0"
    shutil.copytree(world / "RUN", seeds)
    refused = run_case(world, args, words, ("a", "runs"))
    run_case(
        world, suggested(args, refused.stderr.strip()), writes=("a", "runs", "RUN/.lock"), ok=True
    )


def test_the_memory_and_disk_refusals_of_train_suggest_what_is_accepted(
    world,  # noqa: F811
    monkeypatch,
):
    from flatformer.store import resources
    from flatformer.training.jobs import JobSpec

    job, _ = JobSpec("plus-last-even", None, None, 0, (0, 1, 2, 3), "a", {"steps": 20}).build()
    fits_two = resources.memory_needed(job.cfg, job.recipe, 2) + 1
    monkeypatch.setattr(resources, "available_memory", lambda: fits_two)
    args = [*TRAIN, "--seeds", "0-3", "--out", "a"]
    line = run_case(world, args, ["at most 2 seeds fit"], ("a",)).stderr
    seeds = re.search(r"\(--seeds (\d+-\d+)\)", line).group(1)
    run_case(world, [*TRAIN, "--seeds", seeds, "--out", "a"], writes=("a",), ok=True)

    job, _ = JobSpec("plus-last-even", None, None, 0, (0, 1), "b", {"steps": 1000}).build()
    small = resources.estimate(job).disk // 2  # 11 checkpoints a seed: about 5 fit
    monkeypatch.setattr(resources, "free_disk", lambda path: small)
    args = ["train", "plus-last-even", "--steps", "1000", "--seeds", "0-1", "--out", "b"]
    monkeypatch.setattr(resources, "available_memory", lambda: None)
    line = run_case(world, args, ["would fit"], ("b",)).stderr
    setting = re.search(r"--set (checkpoint_every=\d+) would fit", line).group(1)
    run_case(world, [*args, "--set", setting], writes=("b",), ok=True)
