"""Pure maths over arrays and tensors (numpy and torch only: never h5py, transformers or dash)."""
