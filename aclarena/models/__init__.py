"""Checkpoints: finding, inspecting and loading them (HF folders, hub ids, LoRA adapters).

:mod:`.checkpoint` reads files and headers only (no torch); :mod:`.loading` loads models
with transformers/peft; :mod:`.tiny` builds small models and tokenizers locally.
"""
