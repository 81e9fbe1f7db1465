"""Learning-dynamics movies: the files play back with one frame per checkpoint, every frame
shows the numbers of its own checkpoint (checked against the raw weights), the axes never
rescale, parallel rendering equals serial rendering, and bad input is a one-line error."""

import math
import shutil
import subprocess
import sys

import imageio.v2 as imageio2
import imageio.v3 as iio
import numpy as np
import pytest

from conftest import make_run
from flatformer.errors import FlatformerError
from flatformer.training.evaluate import evaluate_run
from flatformer.movies import MOVIES, formats, load_checkpoints, movie_names, prepare, render
from flatformer.store.checkpoints import read_checkpoint
from flatformer.store.runs import load_run
from flatformer.store.layout import checkpoint_path


def cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "flatformer", *map(str, args)], capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    """2,000 steps of the paper's model: 21 checkpoints (every 100 steps, step 0 included)."""
    return make_run(tmp_path_factory.mktemp("movies") / "run", steps=2000, candidates=1)


@pytest.fixture(scope="module")
def animated(short_run):
    """All five movies in both formats, made by the command line."""
    result = cli("animate", short_run)
    assert result.returncode == 0, result.stderr
    return short_run / "movies", result


@pytest.fixture(scope="module")
def scenes(short_run):
    ck = load_checkpoints(load_run(short_run))
    made, skipped = prepare(ck, movie_names(None))
    assert not skipped
    return ck, {s.name: s for s in made}


def raw(run, step):
    """The checkpoint's tensors read straight from its file: the oracle for what frames show."""
    return read_checkpoint(checkpoint_path(run, step))[0]


@pytest.mark.parametrize("name", list(MOVIES))
def test_every_movie_plays_back_with_one_frame_per_checkpoint(animated, scenes, name):
    folder, _ = animated
    ck, made = scenes
    scene = made[name]
    mp4 = imageio2.get_reader(folder / f"{name}.mp4")
    assert mp4.count_frames() == len(ck.steps) == 21
    assert tuple(mp4.get_meta_data()["size"]) == (scene.width, scene.height)
    assert mp4.get_meta_data()["fps"] == 20
    mp4.close()
    gif = iio.imread(folder / f"{name}.gif", index=None)
    assert gif.shape == (21, scene.height, scene.width, 3)
    meta = iio.immeta(folder / f"{name}.gif")
    assert meta["duration"] == 50 and meta["loop"] == 0
    # The GIF's frames are the rendered frames (up to the 256-colour palette), in order.
    for i in (0, 20):
        frame = scene.render(i)[..., :3].astype(int)
        assert np.abs(gif[i].astype(int) - frame).mean() < 2.0
    assert np.abs(gif[0].astype(int) - gif[20].astype(int)).mean() > 2.0
    assert not list(folder.glob(".*part*")), "parts are removed after joining"


def test_command_reports_each_file(animated):
    folder, result = animated
    assert f"{folder}: 5 movies in" in result.stdout
    for name in MOVIES:
        line = next(row for row in result.stdout.splitlines() if name in row)
        sizes = [(folder / f"{name}.{fmt}").stat().st_size / 1e6 for fmt in ("mp4", "gif")]
        assert line.split()[1:] == [f"{sizes[0]:.1f}", "MB", f"{sizes[1]:.1f}", "MB"]


def test_points_are_the_checkpoints_own_embeddings_and_projections(short_run, scenes):
    ck, made = scenes
    emb, qkv = made["mov1_embeddings"], made["mov3_qkv"]
    for i in (0, 7, 20):
        t = raw(short_run, int(ck.steps[i]))
        e = (t["embed.W_E"][:, None] + t["pos_embed.W_pos"][None]).reshape(-1, 2)  # (V*T, 2)
        frame = emb.frame(i)
        np.testing.assert_allclose(frame["token"], t["embed.W_E"], atol=1e-12)
        np.testing.assert_allclose(frame["position"], t["pos_embed.W_pos"], atol=1e-12)
        np.testing.assert_allclose(frame["combined"], e, atol=1e-12)
        q3 = qkv.frame(i)
        for w in "qkv":
            np.testing.assert_allclose(q3[w], e @ t[f"blocks.0.attn.W_{w.upper()}"][0], atol=1e-12)


def test_scores_and_focus_field_follow_the_weights(short_run, scenes):
    ck, made = scenes
    att, focus = made["mov5_qk_attention"], made["mov4_qk_space"]
    V, T = 12, 8
    i = 13
    t = raw(short_run, int(ck.steps[i]))
    e = (t["embed.W_E"][:, None] + t["pos_embed.W_pos"][None]).reshape(-1, 2)
    q, k = e @ t["blocks.0.attn.W_Q"][0], e @ t["blocks.0.attn.W_K"][0]
    scores = att.frame(i)["scores"]
    for a in range(0, V * T, 5):
        for b in range(0, V * T, 3):
            if b % T > a % T:  # key position after the query position: masked
                assert np.isnan(scores[a, b])
            else:
                assert scores[a, b] == pytest.approx(q[a] @ k[b] / math.sqrt(2), rel=1e-5)
    # The focus query is `+` at position 5; its field is linear in the key, q . k / sqrt(2).
    f = focus.frame(i)
    np.testing.assert_allclose(f["query"], q[11 * T + 5])
    field = f["field"]
    lim = focus.qk.limits
    corner = np.array([lim[0], lim[2]])
    assert field[0, 0] == pytest.approx(q[11 * T + 5] @ corner / math.sqrt(2), rel=1e-5)
    assert focus.position == 5 and focus.focus == 11


def test_landscape_is_the_output_network_of_that_checkpoint(short_run, scenes):
    ck, made = scenes
    land = made["mov2_landscape"]
    for i in (0, 20):
        t = raw(short_run, int(ck.steps[i]))
        frame = land.frame(i)
        G = frame["argmax"].shape[0]
        xs = np.linspace(land.limits[0], land.limits[1], G)
        ys = np.linspace(land.limits[2], land.limits[3], G)
        z = np.stack(np.meshgrid(xs, ys), -1)
        h = (
            z
            + np.maximum(z @ t["blocks.0.mlp.W_in"] + t["blocks.0.mlp.b_in"], 0)
            @ t["blocks.0.mlp.W_out"]
            + t["blocks.0.mlp.b_out"]
        )
        logits = h @ t["unembed.W_U"] + t["unembed.b_U"]
        np.testing.assert_array_equal(frame["argmax"], logits.argmax(-1))
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        np.testing.assert_allclose(frame["entropy"], -(p * np.log(p)).sum(-1), atol=1e-9)
    assert not np.array_equal(land.frame(0)["argmax"], land.frame(20)["argmax"])


def test_captions_are_measured_at_each_frames_step(short_run, scenes):
    ck, made = scenes
    rows = {m["step"]: m for m in load_run(short_run).metrics}
    assert ck.evaluated.sum() == sum(s not in rows for s in ck.steps) > 0
    for i, step in enumerate(ck.steps):
        if step in rows:
            assert ck.loss[i] == rows[step]["val_loss"]
            assert ck.rule_error[i] == rows[step]["rule_error"]
    i = int(np.flatnonzero(ck.evaluated)[0])
    oracle = evaluate_run(short_run, int(ck.steps[i]))
    assert ck.loss[i] == pytest.approx(oracle["loss"], rel=1e-12)
    assert ck.rule_error[i] == pytest.approx(oracle["rule_error"], abs=1e-12)
    scene = made["mov1_embeddings"]
    scene.build()
    scene.update(i)
    text = scene.canvas.caption.text
    assert f"step {ck.steps[i]:,} / 2,000" in text
    assert f"loss {ck.loss[i]:.3f}" in text and f"rule error {ck.rule_error[i]:.1%}" in text
    assert scene.canvas.cursor.get_xdata()[0] == ck.steps[i]


@pytest.mark.parametrize("name", list(MOVIES))
def test_artists_move_to_the_frame_and_axes_never_rescale(scenes, name):
    ck, made = scenes
    scene = made[name]
    scene.build()
    scene.render(0)
    limits = [(ax.get_xlim(), ax.get_ylim()) for ax in scene.canvas.panels]
    artist, key, panel = {
        "mov1_embeddings": (lambda s: s.combined_labels, "combined", 2),
        "mov2_landscape": (lambda s: s.point_labels, "combined", 0),
        "mov3_qkv": (lambda s: s.labels["q"], "q", 1),
        "mov4_qk_space": (lambda s: s.keys, "k", 1),
        "mov5_qk_attention": (lambda s: s.qk.q_labels, "q", 0),
    }[name]
    for i in (5, 20):
        scene.render(i)
        assert [(ax.get_xlim(), ax.get_ylim()) for ax in scene.canvas.panels] == limits
        np.testing.assert_array_equal(artist(scene).get_offsets(), scene.frame(i)[key])
    # Every point of every frame lies inside the fixed limits of its panel.
    (x0, x1), (y0, y1) = limits[panel]
    for i in range(len(ck.steps)):
        pts = scene.frame(i)[key]
        assert np.all((pts[:, 0] >= x0) & (pts[:, 0] <= x1))
        assert np.all((pts[:, 1] >= y0) & (pts[:, 1] <= y1))


@pytest.mark.parametrize("name", list(MOVIES))
def test_blitted_frame_equals_a_full_redraw(scenes, name):
    """Only registered artists are redrawn per frame; anything that changes but was not
    registered would stay frozen in the cached background and show here."""
    _, made = scenes
    scene = made[name]
    scene.build()
    scene.render(0)
    fast = scene.render(17)[..., :3].astype(int)
    scene.build()
    scene.update(17)
    fig = scene.canvas.fig
    fig.canvas.draw()
    full = np.asarray(fig.canvas.buffer_rgba())[..., :3].astype(int)
    differ = np.any(fast != full, axis=-1)
    # Draw order differs only where the step cursor crosses the strip's spine (a few pixels);
    # a frozen artist would differ over whole labels or images.
    assert differ.mean() < 2e-4, differ.mean()


def test_parallel_parts_join_to_the_serial_movie(short_run, tmp_path):
    ck = load_checkpoints(load_run(short_run))
    (scene,), _ = prepare(ck, ["mov4_qk_space"])
    one = render([scene], tmp_path / "serial", ["gif"], workers=1)
    three = render([scene], tmp_path / "parallel", ["gif"], workers=3)
    # Three parts of 7 frames joined give the very bytes of the one-part file.
    assert one["mov4_qk_space"][0].read_bytes() == three["mov4_qk_space"][0].read_bytes()


def test_wider_model_uses_one_pca_plane_and_skips_the_landscape(simulator_run, tmp_path):
    result = cli(
        "animate",
        simulator_run,
        "--movies",
        "mov2,mov3",
        "--format",
        "gif",
        "--head",
        "1",
        "--out",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "skipping mov2_landscape" in result.stderr and "d_model == 2" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mov3_qkv.gif"]
    ck = load_checkpoints(load_run(simulator_run))
    (qkv,), skipped = prepare(ck, ["mov2_landscape", "mov3_qkv"], head=1)
    assert list(skipped) == ["mov2_landscape"]
    plane = qkv.geo.planes["q"]
    assert not plane.is_identity
    # Frame i's query points are head 1's queries of that checkpoint, on the last
    # checkpoint's plane: the projection is the same map for every frame.
    V, T = ck.run.cfg.d_vocab, ck.run.cfg.n_ctx
    for i in (0, len(ck.steps) - 1):
        q = ck.models[i].run_with_cache(np.repeat(np.arange(V)[:, None], T, 1))[1][
            "blocks.0.attn.hook_q"
        ][:, :, 1]
        np.testing.assert_allclose(qkv.frame(i)["q"], plane.project(q).reshape(-1, 2), atol=1e-12)
    assert gif_frames(tmp_path / "mov3_qkv.gif") == len(ck.steps)


def gif_frames(path):
    return iio.imread(path, index=None).shape[0]


def test_too_few_checkpoints_is_one_line(short_run, tmp_path):
    lonely = tmp_path / "lonely"
    shutil.copytree(short_run, lonely, ignore=shutil.ignore_patterns("movies"))
    for f in sorted((lonely / "checkpoints").iterdir())[1:]:
        f.unlink()
    result = cli("animate", lonely)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "has 1 checkpoint" in result.stderr and "at least 2" in result.stderr
    with pytest.raises(FlatformerError, match="at least 2"):
        load_checkpoints(load_run(lonely))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--movies", "mov9"], "unknown movie 'mov9'"),
        (["--movies", "embeddings,nope"], "unknown movie 'nope'"),
        (["--format", "avi"], "unknown format 'avi'"),
        (["--fps", "0"], "--fps must be between 1 and 50"),
        (["--head", "3"], "--head 3 does not exist"),
    ],
)
def test_bad_options_are_one_line_errors(short_run, args, message):
    result = cli("animate", short_run, *args)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert message in result.stderr


def test_movie_and_format_names():
    assert movie_names(None) == list(MOVIES)  # the five every run can have
    assert movie_names(None, "modular-addition") == list(MOVIES) + ["mov6_spectrum"]
    assert movie_names(None, "induction") == list(MOVIES) + ["mov7_induction_attention"]
    assert movie_names("6") == ["mov6_spectrum"]
    assert movie_names("3, mov1,qk_attention,mov3_qkv") == [
        "mov3_qkv",
        "mov1_embeddings",
        "mov5_qk_attention",
    ]
    assert formats("GIF") == ["gif"] and formats(None) == ["mp4", "gif"]
