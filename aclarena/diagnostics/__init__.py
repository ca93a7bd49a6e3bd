"""Pure maths over tensors and arrays: token entropy and drift, task vectors, displacement, CL metrics.

Modules here import torch and numpy only (never h5py, transformers or dash), so every
measure can be tested on its own against a naive reference.
"""
