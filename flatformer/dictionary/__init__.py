"""Sparse dictionaries (sparse autoencoders, TopK, BatchTopK, JumpReLU, transcoders) trained on
a model's activations in NumPy, scored as SAELens scores them and against features known to be
there, and written in SAELens's format."""

from .sae import KINDS, Stack, decode, encode, init_stack, loss_and_grads
from .train import Recipe, train_stack
