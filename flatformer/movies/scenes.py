"""The paper's five movies, in order (`MOVIES`), each one scene: points.py draws the
embeddings and the queries, keys and values, landscape.py the output landscape, qk.py the
query/key space and scores; scene.py holds what they share. Movies of one task live in their own
modules (spectrum.py, induction.py).
"""

from __future__ import annotations

from .landscape import LANDSCAPE_RESOLUTION, LandscapeMovie
from .points import EmbeddingsMovie, QKVMovie
from .qk import QKAttentionMovie, QKSpaceMovie

MOVIES = {
    cls.name: cls
    for cls in (EmbeddingsMovie, LandscapeMovie, QKVMovie, QKSpaceMovie, QKAttentionMovie)
}

# LANDSCAPE_RESOLUTION is named here too: resources.MOVIE_GRID is held equal to it by a test.
__all__ = ["LANDSCAPE_RESOLUTION", "MOVIES"]
