"""The main job and what it publishes: the pipeline, the report, the notebook view."""
