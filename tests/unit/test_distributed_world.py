"""aclarena.distributed without a process group: round-robin shares, the launcher's environment,
one-process collectives, and the command line's handling of torchrun (no torch.distributed needed)."""

from __future__ import annotations

import pytest

from aclarena.distributed import (
    DISTRIBUTED_VERBS,
    World,
    env_world,
    is_main_process,
    process_group_size,
    wait_for_everyone,
    world,
)
from aclarena.errors import AclarenaError


@pytest.mark.parametrize("n, size", [(0, 2), (1, 2), (5, 2), (7, 3), (4, 4), (3, 8)])
def test_round_robin_shares_partition_the_batches(n, size):
    shares = [World(rank=r, size=size).mine(n) for r in range(size)]
    assert sorted(b for s in shares for b in s) == list(range(n))  # every batch exactly once
    for r, s in enumerate(shares):
        assert all(b % size == r for b in s) and s == sorted(s)
        assert all(World(rank=r, size=size).owns(b) for b in s)


def test_env_world(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert env_world() == (0, 1, 0)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert env_world() == (3, 4, 1)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(AclarenaError, match="do not fit"):
        env_world()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(AclarenaError, match="not an integer"):
        env_world()


def test_rank_helpers_agree_with_the_world(monkeypatch):
    # one rule for "main process": rank 0 of the launcher's environment, as World.is_main
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    assert is_main_process() and World(*env_world()).is_main
    wait_for_everyone()  # one process: nothing to wait for (accelerate is not asked)
    assert process_group_size() == 1  # no process group initialised
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank, main in (("0", True), ("1", False)):
        monkeypatch.setenv("RANK", rank)
        assert is_main_process() is main and World(*env_world()).is_main is main
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(AclarenaError, match="RANK='x' is not an integer"):
        is_main_process()


def test_one_process_collectives_are_the_identity(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with world("cpu") as w:
        assert (w.rank, w.size, w.is_main, w.distributed) == (0, 1, True, False)
        assert w.gather({"a": 1}) == [{"a": 1}] and w.all_gather(2) == [2] and w.broadcast(3) == 3
        assert w.map_batches(3, lambda mine: mine) == [[0, 1, 2]]
        assert w.run_main(lambda: 5) == 5 and w.device("cuda") == "cuda"
        with pytest.raises(ValueError, match="boom"):
            w.each(lambda: (_ for _ in ()).throw(ValueError("boom")))


def test_several_processes_need_a_rendezvous(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    with pytest.raises(AclarenaError, match="torchrun"), world("cpu"):
        pass


def test_cli_refuses_verbs_that_do_not_shard(monkeypatch, cli, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    code, _, err = cli("vectors", "--run", str(tmp_path))
    assert code == 1 and "does not run data-parallel" in err and ", ".join(sorted(DISTRIBUTED_VERBS)) in err
    # every rank says it: torchrun stops the others when one exits, so rank 0's line alone could be lost
    monkeypatch.setenv("RANK", "1")
    code, out, err = cli("vectors", "--run", str(tmp_path))
    assert code == 1 and out == "" and "does not run data-parallel" in err


def test_cli_accepts_a_leading_double_dash(cli, tmp_path):
    """`torchrun ... -m aclarena -- tokens --run DIR`: the `--` keeps torchrun's parser off --run."""
    code, _, err = cli("--", "checkpoints", "--run", str(tmp_path))
    assert code == 1 and "aclarena.toml" in err
