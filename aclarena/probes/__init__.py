"""Probe sets (frozen reference generations) and teacher-forced scoring.

* :mod:`.probe_set`: what a probe set is, how prompt and trace files are read, how
  conversations become token ids with a mask of the positions the model generated, and
  how probe sets are stored in results.h5.
* :mod:`.generation`: freezing a reference checkpoint's generations on prompts.
* :mod:`.teacher_forcing`: scoring a probe set with any checkpoint against the reference,
  the one place that runs a model for analysis.
"""
