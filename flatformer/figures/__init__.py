"""The paper's figure suite: compute functions (compute.py) and one module per figure group."""
