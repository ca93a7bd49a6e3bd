"""`study --orders` bad input: one line each, nothing created."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("argv", "says"), [
    (("--orders", "math,serch"), "unknown domain 'serch' in order 'math,serch' (did you mean 'search'?)"),
    (("--orders", "search,search"), "repeats the domain 'search'"),
    (("--orders", "pairz"), "unknown design 'pairz' (did you mean 'pairs'?)"),
    (("--dry-run",), "--dry-run applies to an order study; add --orders SPEC"),
])
def test_bad_orders_are_one_line(tmp_path, cli, argv, says):
    code, _, err = cli("study", "--run", str(tmp_path / "x"), *argv)
    assert code == 1 and says in err and err.strip().count("\n") == 0
    assert not (tmp_path / "x").exists()
