from pathlib import Path

from aclarena.cli._docs import render

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_cli_docs_match_the_parsers():
    assert DOCS.read_text() == render(), "docs/cli.md is stale: run `python -m aclarena.cli._docs > docs/cli.md`"
