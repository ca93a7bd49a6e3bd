"""The analysis layer: one module per verb's work, run in, typed result out.

Sits between the CLI (which only parses and prints) and the library below it
(probes, envs, diagnostics, store). See shared design: cli -> analysis -> train/consolidate
-> probes/envs -> models -> diagnostics/store.
"""
