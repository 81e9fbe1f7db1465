"""The README's promise, kept: every command in its ```bash blocks runs verbatim, in order, in a
copy of the repository in a temporary folder, with FLATFORMER_MAX_STEPS set so that training
commands finish in seconds. The text is never edited; the few commands that cannot run here are
listed below, each with its reason, and any other command that fails fails this test."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MAX_STEPS = "200"  # the cap every training job gets: the checkpoints 0, 100 and 200

# Commands skipped, by what they start with, and why. A command chained with && runs the parts
# not listed here.
SKIPPED = {
    "pip install": "installs packages (the test runs on the installed checkout)",
    "python -m pytest": "the test suite itself, which runs this test",
    "ray start": "starts a node of a multi-machine Ray cluster",
}
# Commands that need that Ray cluster (HEAD is its address; /shared a folder every node sees).
NEEDS_CLUSTER = ("--ray HEAD:",)


def readme_commands(text: str) -> list[str]:
    """The commands of the ```bash blocks, in order: one per line (a trailing backslash joins
    lines), comments and blank lines left to the shell."""
    commands = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(line)
    return commands


def runnable_parts(command: str) -> list[str]:
    """The parts of `command` (split at &&) that this test runs."""
    parts = [p.strip() for p in command.split("&&")]
    return [
        p
        for p in parts
        if not p.startswith(tuple(SKIPPED)) and not any(marker in p for marker in NEEDS_CLUSTER)
    ]


def fresh_checkout(dest: Path):
    """The repository's files as a fresh clone has them (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
    )
    if listed.returncode == 0 and listed.stdout:
        for name in listed.stdout.decode().split("\0"):
            if name and (ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dest / name)
    else:
        shutil.copytree(
            ROOT,
            dest,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(
                ".git", "runs", "__pycache__", "*.egg-info", "build", "dist"
            ),
        )
    # numba's cache of the engine, where it is filled: the files copied keep their times, which
    # is all numba checks, so the commands do not compile the kernels again (the cold start
    # has its own test, tests/test_first_run.py).
    for cached in (ROOT / "flatformer").rglob("__pycache__/*.nb[ic]"):
        target = dest / cached.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(cached, target)


def shims(folder: Path) -> Path:
    """`flatformer` and `python` as this interpreter runs them (`-m` puts the checkout first
    on the path), so the commands test this code, not whatever else is on PATH."""
    folder.mkdir()
    for name, body in (
        ("flatformer", f'exec {shlex.quote(sys.executable)} -m flatformer "$@"'),
        ("python", f'exec {shlex.quote(sys.executable)} "$@"'),
    ):
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    return folder


def test_commands_are_found():
    commands = readme_commands(README.read_text())
    assert any(c.startswith("flatformer train") for c in commands)
    assert runnable_parts("pip install -e . && flatformer reproduce") == ["flatformer reproduce"]
    assert runnable_parts("ray start --head --port=6379   # on the head node") == []
    assert runnable_parts("flatformer sweep S.toml --ray HEAD:6379") == []


def test_readme_commands_run_verbatim(tmp_path):
    work = tmp_path / "checkout"
    fresh_checkout(work)
    env = {
        **os.environ,
        "FLATFORMER_MAX_STEPS": MAX_STEPS,
        "PATH": os.pathsep.join([str(shims(tmp_path / "bin")), os.environ["PATH"]]),
        "COLUMNS": "80",
    }
    ran = 0
    for command in readme_commands(README.read_text()):
        for part in runnable_parts(command):
            result = subprocess.run(
                ["bash", "-o", "pipefail", "-c", part],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert result.returncode == 0, f"{part}\n{result.stdout}\n{result.stderr}"
            assert "Traceback" not in result.stdout + result.stderr, part
            # Nothing starts with a blank line (a progress bar stopped before it was shown).
            for stream in (result.stdout, result.stderr):
                assert not stream.startswith("\n"), f"{part}: a blank first line"
            ran += 1
    assert ran >= 10
