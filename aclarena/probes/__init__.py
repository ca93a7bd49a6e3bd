"""Probe sets (frozen reference generations) and teacher-forced scoring.

* :mod:`.probe_set`: how prompt and trace files are read and how conversations become
  token ids with a mask of the positions the model generated (what a probe set is and how
  it is stored in results.h5: :mod:`aclarena.results.probes`).
* :mod:`.generation`: freezing a reference checkpoint's generations on prompts.
* :mod:`.teacher_forcing`: scoring a probe set with any checkpoint against the reference,
  the one place that runs a model for analysis.
"""
