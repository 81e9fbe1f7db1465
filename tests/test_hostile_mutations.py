"""Random mutations of a real run folder (a file replaced, truncated, enlarged, turned into a
link to a file outside or into a FIFO), opened by every reading command in this process: each
ends in a result or one line, never a traceback, and nothing outside the run changes."""

import os
import shutil

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clitools import cli_here
from test_hostile_runs import STEP, tree

FILES = ["config.json", "metrics.jsonl", STEP]
COMMANDS = [
    ["eval", "RUN"],
    ["eval", "RUN", "--json"],
    ["generate", "RUN", "--prompt", "4 1 +", "-n", "2"],
    ["explore", "RUN", "--checkpoints", "1"],
    ["train", "plus-last-even", "--out", "RUN", "--resume", "--steps", "20"],
]


def mutate(path, how, offset, blob, outside):
    data = path.read_bytes() if path.is_file() else b""
    if how == "replace":
        path.write_bytes(blob)
    elif how == "truncate":
        path.write_bytes(data[: offset % (len(data) + 1)])
    elif how == "enlarge":
        path.write_bytes(data + blob * 1000)
    elif how == "flip":
        i = offset % max(1, len(data))
        path.write_bytes(data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :] if data else blob)
    elif how == "symlink":
        path.unlink()
        os.symlink(outside, path)
    elif how == "fifo":
        path.unlink()
        os.mkfifo(path)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    name=st.sampled_from(FILES),
    how=st.sampled_from(["replace", "truncate", "enlarge", "flip", "symlink", "fifo"]),
    offset=st.integers(0, 2**20),
    blob=st.binary(max_size=64),
    command=st.sampled_from(COMMANDS),
)
def test_a_mutated_run_folder_never_gives_a_traceback_or_a_write_outside(
    paper_run, tmp_path_factory, name, how, offset, blob, command
):
    world = tmp_path_factory.mktemp("mutation")
    run = world / "RUN"
    (run / "checkpoints").mkdir(parents=True)
    for f in FILES:
        shutil.copyfile(paper_run / f, run / f)
    (world / "OUTSIDE").mkdir()
    victim = world / "OUTSIDE" / "victim.txt"
    victim.write_text("precious\n")
    mutate(run / name, how, offset, blob, victim)
    before = {k: v for k, v in tree(world).items() if not k.startswith("RUN")}
    cwd = os.getcwd()
    os.chdir(world)
    try:
        result = cli_here(*command)
    finally:
        os.chdir(cwd)
    assert "Traceback" not in result.stdout + result.stderr
    if result.returncode != 0:
        lines = [x for x in result.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("flatformer: error: "), result.stderr
    assert {k: v for k, v in tree(world).items() if not k.startswith("RUN")} == before
    assert victim.read_text() == "precious\n"
