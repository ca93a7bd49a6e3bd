"""The run manifest (aclarena.toml) and the results store (results.h5, series.h5).

This package imports numpy and h5py only, never torch: a store opens anywhere.
"""

from aclarena.store.encoding import Json, Ragged, Table
from aclarena.store.manifest import (
    MANIFEST_NAME,
    CheckpointSpec,
    Manifest,
    load_manifest,
    parse_manifest,
    write_manifest,
)
from aclarena.store.results import RESULTS_NAME, STORE_VERSION, ResultsStore, StoreReader
from aclarena.store.series import SERIES_NAME, SeriesReader, SeriesWriter, read_series

__all__ = [
    "MANIFEST_NAME",
    "RESULTS_NAME",
    "SERIES_NAME",
    "STORE_VERSION",
    "CheckpointSpec",
    "Json",
    "Manifest",
    "Ragged",
    "ResultsStore",
    "SeriesReader",
    "SeriesWriter",
    "StoreReader",
    "Table",
    "load_manifest",
    "parse_manifest",
    "read_series",
    "write_manifest",
]
