"""Atlases: which mechanism each of many small models learned, as a phase diagram.

An atlas file is a sweep file (tasks, presets, recipes, seeds, `sets`, `[set]`; see
flatformer/sweep) with an optional `[draw]` table of random configurations drawn as Zhong et
al. 2023 drew theirs. Every job trains its seeds batched (the sweep's machinery, in local
processes or on Ray), then each run's last checkpoint is measured (measure.py: the published
table's columns and flatformer's own) and its explorer page written; DIR/results.csv holds one
row per run. A job is skipped once DIR/<job>/measures.json is written, so a killed atlas redoes
only the jobs in flight. phase.py bins the runs into the phase diagram that
figures/atlas.py draws and explorer/atlas_page.py shows.

plan.py reads the file and draws; worker.py trains and measures one job; driver.py runs them;
results.py writes and reads results.csv.
"""

from .driver import atlas_rows, plan_atlas, run_atlas
from .measure import MEASURES, MECHANISMS, PUBLISHED, run_measures
from .phase import phase_diagram
from .plan import draw_one, draw_table, draws, expand_atlas, load_atlas
from .results import COLUMNS, CONFIG, read_atlas, results_csv
from .worker import measure_job, measured

__all__ = [
    "COLUMNS",
    "CONFIG",
    "MEASURES",
    "MECHANISMS",
    "PUBLISHED",
    "atlas_rows",
    "draw_one",
    "draw_table",
    "draws",
    "expand_atlas",
    "load_atlas",
    "measure_job",
    "measured",
    "phase_diagram",
    "plan_atlas",
    "read_atlas",
    "results_csv",
    "run_atlas",
    "run_measures",
]
