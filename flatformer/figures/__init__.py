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

from . import attention, data, geometry, landscape, trace
from .compute import NotInPlane
from .context import FigureContext

FIGURES = {
    "fig02_training_data": (data.compute_training_data, data.draw_training_data),
    "fig03_learning_curve": (data.compute_learning_curve, data.draw_learning_curve),
    "fig04_generated_sequences": (data.compute_generated_sequences,
                                  data.draw_generated_sequences),
    "fig05_embeddings": (geometry.compute_embeddings, geometry.draw_embeddings),
    "fig06_qkv": (geometry.compute_qkv, geometry.draw_qkv),
    "fig07_qk_space": (attention.compute_qk_space, attention.draw_qk_space),
    "fig08_trigger_qk_scores": (attention.compute_trigger_qk_scores,
                                attention.draw_trigger_qk_scores),
    "fig09_output_landscape": (landscape.compute_output_landscape,
                               landscape.draw_output_landscape),
    "fig10_landscape_summary": (landscape.compute_landscape_summary,
                                landscape.draw_landscape_summary),
    "fig11_trace_embeddings": (trace.compute_trace_embeddings, trace.draw_trace_embeddings),
    "fig12_trace_qk": (trace.compute_trace_qk, trace.draw_trace_qk),
    "fig13_trace_attention": (trace.compute_trace_attention, trace.draw_trace_attention),
    "fig14_trace_values": (trace.compute_trace_values, trace.draw_trace_values),
    "fig15_trace_nudge": (trace.compute_trace_nudge, trace.draw_trace_nudge),
    "supp_qkv_overview": (geometry.compute_qkv_overview, geometry.draw_qkv_overview),
    "supp_attention_matrices": (trace.compute_attention_matrices,
                                trace.draw_attention_matrices),
    "supp_value_arrows": (trace.compute_value_arrows, trace.draw_value_arrows),
    "supp_qkv_dimensions": (geometry.compute_qkv_dimensions, geometry.draw_qkv_dimensions),
    "supp_qk_full": (attention.compute_qk_full, attention.draw_qk_full),
    "supp_landscape_embeddings": (landscape.compute_landscape_embeddings,
                                  landscape.draw_landscape_embeddings),
    "supp_landscape_values": (landscape.compute_landscape_values,
                              landscape.draw_landscape_values),
}

__all__ = ["FIGURES", "FigureContext", "NotInPlane"]
