"""`eval` when a model generates a NUL character (issue 15): the cell is stored (the transcript
escaped, read back exactly), not "VLEN strings do not support embedded NULLs" and exit 3."""

from __future__ import annotations

from reliability_helpers import VERB_ARGV, fill

from aclarena.results.capability import read_cells
from aclarena.store import ResultsStore


def test_eval_stores_a_transcript_holding_nul(fixture_run, tmp_path, cli, monkeypatch):
    import aclarena.models.loading as loading

    real = loading.load_tokenizer

    def with_nul(*a, **k):  # the model's text holds U+0000, as a byte-level tokenizer can decode
        tok = real(*a, **k)
        decode, batch_decode = tok.decode, tok.batch_decode
        tok.decode = lambda *x, **y: "a\x00" + decode(*x, **y)
        tok.batch_decode = lambda *x, **y: ["a\x00" + t for t in batch_decode(*x, **y)]
        return tok

    monkeypatch.setattr(loading, "load_tokenizer", with_nul)
    code, _, err = cli(*fill(VERB_ARGV["eval"], fixture_run, tmp_path))
    assert code == 0, err
    store = ResultsStore(fixture_run)
    with store.reader() as r:
        (cell,) = read_cells(r)
        assert cell.status == "ok", cell.error
        transcripts = r.read(f"{cell.key}/transcripts")
    assert transcripts and all("\x00" in t for t in transcripts), transcripts
