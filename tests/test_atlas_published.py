"""bench/atlas_published.py on a small synthetic table in the published column format: rows
kept and named as the paper's setting asks, counts per bin, and KS distances known exactly."""

import csv
import importlib.util
import io
from pathlib import Path

import pytest

from flatformer.atlas import results_csv

BENCH = Path(__file__).resolve().parent.parent / "bench" / "atlas_published.py"
# The published table's header (result/1l_fixedwidth.csv of fjzzq2002/pizza).
HEADER = (
    ",Name,State,C,act_fn,attention_dir,attn_coeff,batch_size,d_model,diff_vocab,epoch,eqn_sign,"
    "frac,func,funcs,lr,n_heads,n_layers,name,runid,weight_decay,best_test_accuracy,"
    "best_train_accuracy,distance_irrelevance,generalization_delay1,generalization_delay2,"
    "generalization_gap,mean_std_row,med_std_row,parameter_norm,std_mean_col,std_med_col,"
    "training_accuracy,training_loss,validation_accuracy,validation_loss,gradient_sim,circularity"
).split(",")


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("atlas_published", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def published_row(i, coeff, grad, dist, circ=0.9, val=1.0, **setting):
    row = dict.fromkeys(HEADER, "")
    row.update(
        {
            "": str(i),
            "Name": f"run-{i}",
            "State": "finished",
            "C": "59",
            "act_fn": "ReLU",
            "attn_coeff": str(coeff),
            "d_model": "128",
            "diff_vocab": "0",
            "eqn_sign": "0",
            "frac": "0.8",
            "n_layers": "1",
            "runid": f"id{i}",
            "training_accuracy": "1",
            "validation_accuracy": str(val),
            "gradient_sim": str(grad),
            "distance_irrelevance": str(dist),
            "circularity": str(circ),
        }
    )
    row.update({k: str(v) for k, v in setting.items()})
    return row


def write_published(path, rows):
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, HEADER, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(buffer.getvalue())


def test_published_rows_are_kept_named_and_binned(bench, tmp_path):
    rows = [
        published_row(0, 0.05, 0.995, 0.1),  # pizza
        published_row(1, 0.02, 0.999, 0.2),  # pizza
        published_row(2, 0.95, 0.40, 0.7),  # clock
        published_row(3, 0.97, 0.99, 0.7),  # the measures disagree: other
        published_row(4, 0.99, 0.40, 0.7, val=0.9),  # 98% of all pairs right: other
        published_row(5, 0.5, 0.40, 0.7, n_layers=2),  # off the main setting
        {**published_row(6, 0.5, 0.4, 0.7), "gradient_sim": ""},  # not finished
    ]
    write_published(tmp_path / "pub.csv", rows)
    kept = bench.read_published(tmp_path / "pub.csv")
    assert [r["job"] for r in kept] == ["id0", "id1", "id2", "id3", "id4"]
    assert [r["mechanism"] for r in kept] == ["pizza", "pizza", "clock", "other", "other"]
    assert kept[4]["accuracy"] == pytest.approx(0.8 + 0.2 * 0.9)
    assert len(bench.read_published(tmp_path / "pub.csv", keep_all=True)) == 6

    ours = [
        {
            "job": "a",
            "seed": 0,
            "attn_coeff": 0.01,
            "gradient_sim": 0.995,
            "distance_irrelevance": 0.1,
            "circularity": 0.9,
            "mechanism": "pizza",
        },
        {
            "job": "b",
            "seed": 0,
            "attn_coeff": 0.99,
            "gradient_sim": 0.3,
            "distance_irrelevance": 0.8,
            "circularity": 0.9,
            "mechanism": "clock",
        },
    ]
    (tmp_path / "ours.csv").write_text(results_csv(ours))
    read = bench.read_ours(tmp_path / "ours.csv")
    assert [r["mechanism"] for r in read] == ["pizza", "clock"]
    entries = bench.compare(kept, read, bins=10)
    assert [e["bin"] for e in entries][::10] == ["0-0.1", "all"]
    first, last, total = entries[0], entries[9], entries[10]
    assert (first["published_n"], first["published_pizza"], first["ours_pizza"]) == (2, 1.0, 1.0)
    assert (last["published_n"], last["ours_n"]) == (3, 1)
    assert last["published_clock"] == pytest.approx(1 / 3) and last["ours_clock"] == 1.0
    assert entries[5]["published_n"] == 0 and entries[5]["published_clock"] is None
    assert total["published_n"] == 5 and total["ours_n"] == 2
    # KS, worked by hand: the published gradient_sim in the first bin {0.995, 0.999} against
    # ours {0.995}: the CDFs differ by 1/2 at 0.995; circularity is identical: 0.
    assert first["ks_gradient_sim"] == pytest.approx(0.5)
    assert first["ks_circularity"] == 0.0
    # Disjoint samples are at distance 1; an empty side has none.
    assert bench.ks_distance([0, 1], [2, 3]) == 1.0 and bench.ks_distance([], [1]) is None
    text = bench.table(entries)
    assert text.count("\n") == 12 and "| all | 5 |" in text
