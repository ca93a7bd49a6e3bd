"""Pure maths over arrays and tensors (torch and numpy only: no h5py, no transformers, no dash).

Each module is one analyzer; its docstring says what the measure is and where it comes from.
"""
