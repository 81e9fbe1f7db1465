"""The paper's figure suite, for any run.

Each figure is a pair: `compute(ctx) -> data` reads arrays from a `FigureContext` (one run at
one checkpoint, whose shared computations live in compute.py), and `draw(data, fig=None) ->
Figure` draws them and returns the matplotlib Figure. Nothing here saves files: the `figures`
command does. `FIGURES` maps each figure's file name to its pair, in the paper's order.

    from flatformer.figures import FIGURES, FigureContext
    ctx = FigureContext(load_run("runs/plus-last-even-seed0"))
    compute, draw = FIGURES["fig10_landscape_summary"]
    fig = draw(compute(ctx))
"""

from __future__ import annotations

from . import (
    attention,
    circuit,
    data,
    grokking,
    induction,
    landscape,
    trace,
    trace_attention,
    trace_values,
    value_arrows,
)
from . import embeddings as geometry
from .compute import NotInPlane
from .context import FigureContext


def _pair(module, stem: str):
    """A figure's (compute, draw) pair, named compute_STEM and draw_STEM in its module."""
    return getattr(module, f"compute_{stem}"), getattr(module, f"draw_{stem}")


FIGURES = {
    "fig02_training_data": _pair(data, "training_data"),
    "fig03_learning_curve": _pair(data, "learning_curve"),
    "fig04_generated_sequences": _pair(data, "generated_sequences"),
    "fig05_embeddings": _pair(geometry, "embeddings"),
    "fig06_qkv": _pair(geometry, "qkv"),
    "fig07_qk_space": _pair(attention, "qk_space"),
    "fig08_trigger_qk_scores": _pair(attention, "trigger_qk_scores"),
    "fig09_output_landscape": _pair(landscape, "output_landscape"),
    "fig10_landscape_summary": _pair(landscape, "landscape_summary"),
    "fig11_trace_embeddings": _pair(trace, "trace_embeddings"),
    "fig12_trace_qk": _pair(trace, "trace_qk"),
    "fig13_trace_attention": _pair(trace_attention, "trace_attention"),
    "fig14_trace_values": _pair(trace_values, "trace_values"),
    "fig15_trace_nudge": _pair(trace_values, "trace_nudge"),
    "supp_qkv_overview": _pair(geometry, "qkv_overview"),
    "supp_attention_matrices": _pair(trace_attention, "attention_matrices"),
    "supp_value_arrows": _pair(value_arrows, "value_arrows"),
    "supp_qkv_dimensions": _pair(geometry, "qkv_dimensions"),
    "supp_qk_full": _pair(attention, "qk_full"),
    "supp_landscape_embeddings": _pair(landscape, "landscape_embeddings"),
    "supp_landscape_values": _pair(landscape, "landscape_values"),
    "supp_circuit": _pair(circuit, "circuit"),
}

# A task's own figures, drawn before the paper's suite for runs of that task.
TASK_FIGURES = {
    "modular-addition": {
        "grok01_progress": _pair(grokking, "progress"),
        "grok02_spectrum": _pair(grokking, "spectrum"),
    },
    "induction": {"induction_phase_change": _pair(induction, "phase_change")},
}


def figures_for(task) -> dict:
    """Every figure of a run of `task`: its own first, then the paper's suite."""
    return {**TASK_FIGURES.get(task.name, {}), **FIGURES}


__all__ = ["FIGURES", "TASK_FIGURES", "FigureContext", "NotInPlane", "figures_for"]
