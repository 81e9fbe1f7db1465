"""Run folders as hostile input, and no write outside the run (issue 32): planted links,
someone else's folder, files that are not regular or not sane, configs that no longer match
their task, numbers out of sense, work too big to start, and the server's Host check. Every
case runs in this process and ends in one line and a non-zero exit (or a sane result), with
no traceback, within seconds; the tree around the run is snapshot before and after, so a
write outside it fails the test."""

import json
import os
import re
import shutil
import time

import pytest

from clitools import assert_one_line_error, cli_here

STEP = "checkpoints/step_020000.safetensors"


def tree(folder) -> dict:
    """Every path under `folder` with its kind, size and modification time (links not followed)."""
    found = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            found[os.path.relpath(p, folder)] = (
                st.st_mode,
                st.st_size,
                None if name in dirs else st.st_mtime_ns,
            )
    return found


@pytest.fixture
def world(paper_run, tmp_path, monkeypatch):
    """tmp_path holds RUN (a copy of the paper run) beside OUTSIDE/victim.txt, a file nobody
    may write; the working directory is tmp_path."""
    run = tmp_path / "RUN"
    (run / "checkpoints").mkdir(parents=True)
    for name in ("config.json", "metrics.jsonl", STEP):
        shutil.copyfile(paper_run / name, run / name)
    (tmp_path / "OUTSIDE").mkdir()
    (tmp_path / "OUTSIDE" / "victim.txt").write_text("precious\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_case(world, args, words=(), writes=("RUN",), ok=False):
    """Run `args`; refused in one line naming `words` (or exit 0 when `ok`), in seconds, and
    nothing changed outside the folders named in `writes`."""
    before = {k: v for k, v in tree(world).items() if not k.startswith(tuple(writes))}
    started = time.perf_counter()
    result = cli_here(*args)
    assert time.perf_counter() - started < 20
    assert "Traceback" not in result.stdout + result.stderr
    if ok:
        assert result.returncode == 0, result.stderr
    else:
        assert_one_line_error(result, *words)
    after = {k: v for k, v in tree(world).items() if not k.startswith(tuple(writes))}
    assert after == before
    assert (world / "OUTSIDE" / "victim.txt").read_text() == "precious\n"
    return result


TRAIN = ["train", "plus-last-even", "--steps", "20"]

# (how the world is spoiled, arguments, words of the one line)
PLANTED = [
    (
        lambda w: (w / "new").mkdir() or os.symlink(w / "OUTSIDE/victim.txt", w / "new/.lock"),
        [*TRAIN, "--out", "new"],
        ["lock", "link"],
    ),
    (lambda w: os.symlink(w / "OUTSIDE", w / "new"), [*TRAIN, "--out", "new"], ["symbolic link"]),
    (
        lambda w: (w / "new").mkdir() or os.symlink(w / "OUTSIDE", w / "new/checkpoints"),
        [*TRAIN, "--out", "new"],
        ["checkpoints", "symbolic link"],
    ),
    (
        lambda w: (
            (w / "new").mkdir() or os.symlink(w / "OUTSIDE/victim.txt", w / "new/metrics.jsonl")
        ),
        [*TRAIN, "--out", "new"],
        ["metrics.jsonl", "symbolic link"],
    ),
    (
        lambda w: (w / "new").mkdir() or (w / "new/metrics.jsonl").write_text("theirs\n"),
        [*TRAIN, "--out", "new"],
        ["not empty", "holds no flatformer run"],
    ),
    (
        lambda w: (
            (w / "new/checkpoints").mkdir(parents=True)
            or (w / "new/checkpoints/step_000000.safetensors").write_bytes(b"theirs")
        ),
        [*TRAIN, "--out", "new"],
        ["not empty"],
    ),
    (
        lambda w: (w / "new").mkdir() or (w / "new/notes.txt").write_text("mine\n"),
        [*TRAIN, "--out", "new"],
        ["not empty"],
    ),
    (lambda w: None, [*TRAIN, "--out", "/"], ["root"]),
    (lambda w: None, [*TRAIN, "--out", "OUTSIDE/victim.txt"], ["file"]),
    (lambda w: None, ["train", "plus-last-even", "--out", "RUN"], ["--resume"]),
    (
        lambda w: (
            os.symlink(w / "OUTSIDE", w / "RUN/ck")
            or shutil.rmtree(w / "RUN/checkpoints")
            or os.rename(w / "RUN/ck", w / "RUN/checkpoints")
        ),
        ["eval", "RUN"],
        ["symbolic link"],
    ),
    (lambda w: os.symlink(w / "RUN", w / "LINK"), ["eval", "LINK"], ["symbolic link"]),
    (
        lambda w: (
            (w / "RUN/config.json").unlink()
            or os.symlink(w / "OUTSIDE/victim.txt", w / "RUN/config.json")
        ),
        ["eval", "RUN"],
        ["symbolic link"],
    ),
    (
        lambda w: os.symlink(w / "OUTSIDE/victim.txt", w / "RUN/.lock"),
        ["train", "plus-last-even", "--out", "RUN", "--resume"],
        ["symbolic link"],
    ),
    (
        lambda w: (
            os.symlink(w / "OUTSIDE", w / "RUN/ck")
            or shutil.rmtree(w / "RUN/checkpoints")
            or os.rename(w / "RUN/ck", w / "RUN/checkpoints")
        ),
        ["explore", "RUN"],
        ["symbolic link"],
    ),
    (
        lambda w: (
            os.symlink(w / "OUTSIDE/victim.txt", w / "RUN/metrics.jsonl.x")
            or (w / "RUN/metrics.jsonl").unlink()
            or os.rename(w / "RUN/metrics.jsonl.x", w / "RUN/metrics.jsonl")
        ),
        ["explore", "RUN"],
        ["symbolic link"],
    ),
]


@pytest.mark.parametrize("spoil, args, words", PLANTED, ids=range(len(PLANTED)))
def test_no_write_through_a_planted_link_or_into_a_folder_not_ours(world, spoil, args, words):
    spoil(world)
    run_case(world, args, words, writes=("RUN/.lock",))


def test_a_symlink_at_the_target_of_an_atomic_write_is_replaced_not_followed(world):
    from flatformer.store.write import atomic_write

    os.symlink(world / "OUTSIDE/victim.txt", world / "RUN/explorer.html")
    atomic_write(world / "RUN/explorer.html", b"page")
    assert not (world / "RUN/explorer.html").is_symlink()
    assert (world / "OUTSIDE/victim.txt").read_text() == "precious\n"
    assert not list((world / "RUN").glob("*.tmp"))


def test_the_suggestion_to_resume_is_itself_accepted(world):
    refused = run_case(
        world, ["train", "plus-last-even", "--out", "RUN"], ["--resume"], ("RUN/.lock",)
    )
    assert "pass --resume" in refused.stderr
    run_case(world, ["train", "plus-last-even", "--out", "RUN", "--resume"], ok=True)


def fifo(path):
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def deep(n):
    return ("[" * n + "]" * n).encode()


# (file in RUN, new content or a function of the path, arguments, words): reads the checked
# reader refuses: not a regular file, too deep, undecodable; and configs against their task.
SPOILED = [
    ("config.json", fifo, ["eval", "RUN"], ["not a file"]),
    ("config.json", deep(1000), ["eval", "RUN"], ["nested more than 64"]),
    ("config.json", b'{"task": NaN}', ["eval", "RUN"], ["not valid JSON"]),
    ("config.json", b"\xc3\x28{}", ["eval", "RUN"], ["not UTF-8"]),
    (STEP, fifo, ["eval", "RUN"], ["not a regular file"]),
    (
        "config.json",
        lambda c: c.replace(b'"task": "plus-last-even"', b'"task": "successor"'),
        ["eval", "RUN"],
        ["vocabulary"],
    ),
    (
        "config.json",
        lambda c: c.replace(b'"task": "plus-last-even"', b'"task": "no-such"'),
        ["eval", "RUN"],
        ["config.json"],
    ),
    (
        "config.json",
        lambda c: c.replace(b'"task": "plus-last-even"', b'"task": "corpus"'),
        ["eval", "RUN"],
        ["config.json"],
    ),
    (
        "config.json",
        lambda c: c.replace(
            b'"task": "plus-last-even",', b'"task": "plus-last-even", "task_settings": {"x": 1},'
        ),
        ["eval", "RUN"],
        ["config.json"],
    ),
    ("config.json", lambda c: c.replace(b'"+"', b'"plus"'), ["eval", "RUN"], ["vocabulary"]),
    (
        "config.json",
        lambda c: c.replace(b'"n_ctx": 8', b'"n_ctx": 80'),
        ["eval", "RUN"],
        ["W_pos", "the config says"],
    ),
]


@pytest.mark.parametrize("name, spoil, args, words", SPOILED, ids=range(len(SPOILED)))
def test_a_spoiled_file_is_refused_by_the_checked_reader(world, name, spoil, args, words):
    path = world / "RUN" / name
    if callable(spoil) and spoil is fifo:
        fifo(path)
    elif callable(spoil):
        path.write_bytes(spoil(path.read_bytes()))
    else:
        path.write_bytes(spoil)
    run_case(world, args, words)


def test_a_stray_checkpoint_beyond_the_runs_steps_is_not_preferred(world):
    shutil.copyfile(world / "RUN" / STEP, world / "RUN/checkpoints/step_999999.safetensors")
    result = run_case(world, ["eval", "RUN", "--json"], ok=True)
    assert json.loads(result.stdout)["step"] == 20000


def test_weights_that_overflow_softmax_are_refused(world):
    import numpy as np
    from safetensors.numpy import load, save

    path = world / "RUN" / STEP
    data = load(path.read_bytes())
    data["unembed.W_U"] = data["unembed.W_U"] * 1e305
    path.write_bytes(save(data, metadata={"format": "flatformer-1"}))
    assert np.isfinite(data["unembed.W_U"]).all()
    result = cli_here("eval", "RUN", "--json")
    assert "Traceback" not in result.stderr
    if result.returncode == 0:  # sane: a finite loss in strict JSON
        assert np.isfinite(json.loads(result.stdout)["loss"])
    else:
        assert_one_line_error(result, "not finite")


def test_a_metrics_file_that_is_a_fifo_is_refused_not_waited_on(world):
    from flatformer.errors import FlatformerError
    from flatformer.store.runs import read_metrics

    fifo(world / "RUN/metrics.jsonl")
    with pytest.raises(FlatformerError, match="not a file"):
        read_metrics(world / "RUN")


@pytest.mark.parametrize("value", ["²", "٣", "1e3", "-5", "0", "10**9"])
def test_the_step_cap_variable_takes_ascii_digits_only(world, monkeypatch, value):
    monkeypatch.setenv("FLATFORMER_MAX_STEPS", value)
    run_case(world, [*TRAIN, "--out", "new"], ["FLATFORMER_MAX_STEPS"], ())


SWEEPS = [
    (
        "tasks = ["
        + ",".join(f'"t{i}"' for i in range(200))
        + "]\nrecipes = ["
        + ",".join(f'"r{i}"' for i in range(100))
        + ']\nseeds = "0-1"\n',
        ["20,000 jobs"],
    ),
    (
        'tasks = ["plus-last-even"]\nrecipes = ["paper"]\nseeds = "0-1"\nsets = ['
        + ",".join("{lr = %d}" % i for i in range(1, 10_002))
        + "]\n",
        ["jobs", "at most 10,000"],
    ),
    ("a = " + "[" * 5000 + "]" * 5000 + "\n", ["TOML"]),
    (b"\xff\xfe", ["not UTF-8"]),
]


@pytest.mark.parametrize("text, words", SWEEPS, ids=range(len(SWEEPS)))
def test_a_sweep_too_big_or_spoiled_is_refused_before_expansion(world, text, words):
    path = world / "s.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    run_case(world, ["sweep", "s.toml", "--out", "sw"], words, ("s.toml",))
    assert not (world / "sw").exists()


def test_a_sweep_file_that_is_a_fifo_or_a_device_is_refused(world):
    os.mkfifo(world / "s.toml")
    run_case(world, ["sweep", "s.toml", "--out", "sw"], ["not a file"], ())
    run_case(world, ["sweep", "/dev/zero", "--out", "sw"], ["not a file"], ())


def test_an_unreadable_done_file_means_the_job_is_not_finished(tmp_path):
    from flatformer.sweep import finished

    job = {"folder": str(tmp_path), "seeds": [0, 0], "steps": 1}
    for content in (deep(10_000), b"\xff", b"[1]", b"NaN"):
        (tmp_path / "done.json").write_bytes(content)
        assert finished(job) is None
    fifo(tmp_path / "done.json")
    assert finished(job) is None


TOKENS = ["$x^$", r"$\frac$", "a\\$b$", "$$", "\\", "x" * 100_000, "${", "$_$"]


@pytest.mark.parametrize("token", TOKENS, ids=range(len(TOKENS)))
def test_a_token_name_is_drawn_as_text(token):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from flatformer.readout.labels import MAX_LABEL, label

    started = time.perf_counter()
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.text(0.5, 0.5, label(token))
    ax.set_xticks([0, 1], [label(token), label(token + "$")])
    fig.canvas.draw()
    plt.close(fig)
    assert len(label(token).replace("\\$", "$")) <= MAX_LABEL
    assert time.perf_counter() - started < 5


def test_strict_json_has_no_nan_and_says_why():
    from flatformer.store.limits import strict_json
    from flatformer.store.read import parse_json

    text = strict_json({"loss": float("nan"), "rows": [1.0, float("inf")], "ok": 2})
    data = parse_json(text, "output")
    assert data["loss"] is None and data["rows"] == [1.0, None] and data["ok"] == 2
    assert len(data["non_finite"]) == 2 and "loss" in data["non_finite"][0]


def test_eval_json_is_strict_json(world):
    from flatformer.store.read import parse_json

    result = run_case(world, ["eval", "RUN", "--json"], ok=True)
    assert parse_json(result.stdout, "eval --json")["step"] == 20000


@pytest.mark.parametrize(
    "host, status",
    [
        ("evil.example:{port}", 403),
        ("127.0.0.1.nip.io:{port}", 403),
        ("localhost:1", 403),
        ("", 403),
        ("127.0.0.1:{port}", 200),
        ("localhost:{port}", 200),
    ],
)
def test_the_server_answers_only_its_loopback_names(host, status):
    import http.client
    import threading

    from flatformer.commands.explore import make_server

    server = make_server(b"<html></html>", 0)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.putrequest("GET", "/", skip_host=True)
        if host:
            conn.putheader("Host", host.format(port=port))
        conn.endheaders()
        response = conn.getresponse()
        assert response.status == status
        if status == 200:
            assert response.getheader("Content-Security-Policy") == "frame-ancestors 'none'"
        conn.close()
    finally:
        server.shutdown()
        server.server_close()


SWEEP = 'tasks = ["plus-last-even"]\nrecipes = ["paper"]\nseeds = "0-0"\nsets = [{steps = 20}]\n'
# Every writer with an explicit output: (arguments before --out, the writer's ok rerun case)
WRITERS = [
    ["figures", "RUN", "--only", "fig02"],
    ["animate", "RUN", "--movies", "mov1"],
    ["compare", "RUN"],
    ["sweep", "s.toml"],
]
FILE_WRITERS = [["explore", "RUN"], ["playground"], ["prompts", "RUN"]]


def link_out(w, name="out"):
    os.symlink(w / "OUTSIDE", w / name)


def foreign_out(w, name="out"):
    (w / name).mkdir()
    (w / name / "notes.txt").write_text("theirs\n")


CLAIMS = [
    (lambda w: None, "/", ["root"]),
    (link_out, "out", ["symbolic link"]),
    (lambda w: None, "OUTSIDE/victim.txt", ["is a file"]),
    (foreign_out, "out", ["not empty"]),
]


@pytest.mark.parametrize("spoil, target, words", CLAIMS, ids=range(len(CLAIMS)))
@pytest.mark.parametrize("writer", WRITERS, ids=lambda w: w[0])
def test_every_writer_claims_its_output_folder_first(world, writer, spoil, target, words):
    (world / "s.toml").write_text(SWEEP)
    spoil(world)
    run_case(world, [*writer, "--out", target], words, ("RUN/.lock",))


FILE_CLAIMS = [
    (lambda w: None, "/", ["is a folder"]),
    (
        lambda w: os.symlink(w / "OUTSIDE/victim.txt", w / "page.html"),
        "page.html",
        ["symbolic link"],
    ),
    (lambda w: None, "OUTSIDE", ["is a folder"]),
]


@pytest.mark.parametrize("spoil, target, words", FILE_CLAIMS, ids=range(len(FILE_CLAIMS)))
@pytest.mark.parametrize("writer", FILE_WRITERS, ids=lambda w: w[0])
def test_every_file_writer_refuses_a_folder_or_a_link(world, writer, spoil, target, words):
    spoil(world)
    run_case(world, [*writer, "--out", target], words, ())


def test_a_folder_of_our_own_figures_is_written_again(world):
    for _ in range(2):
        run_case(
            world,
            ["figures", "RUN", "--only", "fig02", "--jobs", "1", "--out", "figs"],
            writes=("figs", "RUN/.lock"),
            ok=True,
        )
    assert sorted(p.suffix for p in (world / "figs").iterdir()) == [".png"]


@pytest.fixture
def big_run(paper_run, world):
    """RUN with every checkpoint of the paper run (201 of them): a movie of 201 frames."""
    shutil.rmtree(world / "RUN")
    shutil.copytree(paper_run, world / "RUN", ignore=shutil.ignore_patterns("movies", "figures"))
    return world


def test_the_movie_memory_is_estimated_and_refused_with_the_every_that_fits(big_run, monkeypatch):
    from flatformer.store import resources
    from flatformer.movies.scenes import LANDSCAPE_RESOLUTION
    from flatformer.store.runs import load_run

    assert resources.MOVIE_GRID == LANDSCAPE_RESOLUTION
    cfg = load_run(big_run / "RUN").cfg
    # room for the frames of --every 20 (11 frames) and not for all 201
    monkeypatch.setattr(
        resources, "available_memory", lambda: resources.movie_memory(cfg, 11, 1, 1) + 1
    )
    args = ["animate", "RUN", "--movies", "mov1", "--format", "gif", "--workers", "1"]
    refused = run_case(big_run, args, ["201 frames", "--every 20 would fit"], ())
    suggestion = refused.stderr.split("; ")[-1].split(" would fit")[0].split()
    accepted = run_case(big_run, [*args, *suggestion], writes=("RUN",), ok=True)
    assert "estimate: 1 movies x 11 frames" in accepted.stderr
    assert (big_run / "RUN/movies/mov1_embeddings.gif").is_file()


def test_figures_too_many_processes_for_the_memory_are_refused_with_the_jobs_that_fit(
    world, monkeypatch
):
    from flatformer.store import resources
    from flatformer.store.runs import load_run

    cfg = load_run(world / "RUN").cfg
    monkeypatch.setattr(resources, "available_memory", lambda: resources.figures_memory(cfg, 1) + 1)
    args = ["figures", "RUN", "--only", "fig02", "--jobs", "2"]
    refused = run_case(world, args, ["2 processes", "--jobs 1 would fit"], ())
    suggestion = refused.stderr.split("; ")[-1].split(" would fit")[0].split()
    run_case(world, [*args, *suggestion], writes=("RUN",), ok=True)


def test_a_comparison_over_the_memory_is_refused_with_the_option_that_fits(world, monkeypatch):
    from conftest import make_run

    from flatformer.store import resources
    from flatformer.store.runs import seed_runs

    seeds = make_run(world / "seeds", seeds="0-1", steps=200)
    cfg = seed_runs(seeds)[0].cfg
    monkeypatch.setattr(
        resources, "available_memory", lambda: resources.compare_memory(cfg, 2, False) + 1
    )
    refused = run_case(
        world, ["compare", "seeds"], ["2 seeds", "--no-figures would fit"], ("seeds",)
    )
    suggestion = refused.stderr.split("; ")[-1].split(" would fit")[0].split()
    accepted = run_case(world, ["compare", "seeds", *suggestion], writes=("seeds",), ok=True)
    assert "estimate: 2 seeds" in accepted.stderr


def test_a_sweep_says_its_estimate_before_it_trains(world):
    (world / "s.toml").write_text(SWEEP)
    result = run_case(
        world,
        ["sweep", "s.toml", "--out", "sw", "--workers", "1"],
        writes=("sw", "s.toml"),
        ok=True,
    )
    assert re.search(
        r"estimate: 1 unfinished jobs, 1 at a time, the largest about [\d.]+ "
        r"[kMG]B of memory; about [\d.]+ [kMG]B to write",
        result.stderr,
    )


def test_the_trainer_proves_its_stream_in_range_before_any_kernel():
    """A training stream whose token or target reaches past the vocabulary is refused (the
    compiled kernels do not check bounds), and masked targets (-1) are not mistaken for one."""
    from types import SimpleNamespace

    import numpy as np

    from flatformer.config import preset
    from flatformer.errors import FlatformerError
    from flatformer.training.evaluate import check_indices

    cfg = preset("paper-2d", 12)
    ok = SimpleNamespace(train=SimpleNamespace(tokens=np.arange(12), target=np.full(12, -1)))
    check_indices(ok, cfg, "run")
    for tokens, target in ((np.arange(13), np.full(13, -1)), (np.arange(12), np.full(12, 12))):
        bad = SimpleNamespace(train=SimpleNamespace(tokens=tokens, target=target))
        with pytest.raises(FlatformerError, match="beyond the model's vocabulary of 12"):
            check_indices(bad, cfg, "run")


def test_the_page_cuts_token_names_at_the_figures_limit():
    """The explorer shows a token's name cut at the same length as figures and tables: the
    limit is shipped from labels.py, and no page script keeps a copy."""
    import json
    import re
    from pathlib import Path

    from flatformer.readout import labels

    from flatformer.explorer.page import SCRIPTS, constants_script

    shipped = re.fullmatch(r"const FlatConstants = (.*);", constants_script()).group(1)
    assert json.loads(shipped)["MAX_LABEL"] == labels.MAX_LABEL
    scripts = [(Path(labels.__file__).parent.parent / "explorer" / n).read_text() for n in SCRIPTS]
    assert sum("FlatConstants.MAX_LABEL" in s for s in scripts) >= 1
    assert not any(re.search(r"LABEL_MAX|> 24 \?", s) for s in scripts)
    assert labels.short("x" * 100) == "x" * (labels.MAX_LABEL - 1) + "\u2026"


def test_a_start_killed_before_its_config_was_written_is_run_again(world):
    """The lock, an empty checkpoints/ and an atomic write's temporary file are what a run
    killed at its start leaves: the same command run again trains there (a sweep retries so);
    one more file of anyone's and the folder is refused."""
    left = world / "new"
    (left / "checkpoints").mkdir(parents=True)
    (left / ".lock").touch()
    (left / "config.json.0123456789ab.tmp").write_text("{")
    run_case(world, [*TRAIN, "--out", "new"], writes=("new",), ok=True)
    assert (left / "config.json").is_file() and not list(left.glob("*.tmp"))
    other = world / "other"
    (other / "checkpoints").mkdir(parents=True)
    (other / "checkpoints" / "notes.txt").write_text("mine\n")
    run_case(world, [*TRAIN, "--out", "other"], ["not empty"], writes=())
