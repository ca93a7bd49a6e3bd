"""Early-warning maths (EWMA rule, thresholds, McNemar drop), the [monitor] config and the callback's checks."""

from __future__ import annotations

import dataclasses
import math
import random

import numpy as np
import pytest

from aclarena.diagnostics.early_warning import (
    MetricRule,
    TrendRule,
    WarningDetector,
    detect,
    drop_label,
    drop_points,
    drop_reachable,
    drop_reachable_in,
    first_alert,
    first_drop,
    holm_adjusted,
    lead_time,
    mcnemar_drop_pvalue,
    min_items,
)
from aclarena.errors import AclarenaError, ConfigError
from aclarena.results.monitor_series import latest_rows
from aclarena.train.config import parse_config


def naive_trend(xs, rule):
    """Alerts of the EWMA rule written out plainly: the indices where it fires."""
    fired, mean, var, n, firing = [], None, 0.0, 0, False
    for i, x in enumerate(xs):
        if mean is None:
            mean, var, n = x, 0.0, 1
            continue
        s = max(math.sqrt(var), rule.min_std, rule.rel_std * abs(mean))
        z = (x - mean) / s
        beyond = z > rule.z if rule.direction == "up" else (z < -rule.z if rule.direction == "down" else abs(z) > rule.z)
        beyond = beyond and n >= rule.warmup
        if beyond and not firing:
            fired.append(i)
        firing = beyond
        # the textbook exponentially weighted mean and variance (Finch 2009, eq. 143)
        diff = x - mean
        incr = rule.alpha * diff
        mean = mean + incr
        var = (1 - rule.alpha) * (var + diff * incr)
        n += 1
    return fired


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("direction", ["up", "down", "both"])
def test_trend_rule_matches_naive(seed, direction):
    rng = random.Random(seed)
    xs = [rng.gauss(0, 1) + (8 if 20 <= i < 24 else 0) - (8 if 40 <= i < 43 else 0) for i in range(60)]
    rule = TrendRule(alpha=rng.choice([0.1, 0.3, 0.7]), z=rng.choice([2.0, 3.0]), warmup=rng.choice([1, 3]),
                     min_std=0.05, rel_std=0.0, direction=direction)
    alerts = detect(list(range(60)), "p", {"m": xs}, {"m": MetricRule(trend=rule)})
    assert [a.step for a in alerts] == naive_trend(xs, rule)
    steps = [a.step for a in alerts]
    if direction in ("up", "both"):
        assert 20 in steps or 19 in steps  # the jump is caught (unless noise already fired the step before)
    if direction == "down":
        assert 20 not in steps


def test_detector_is_incremental_and_per_series():
    rules = {"fkl": MetricRule(threshold=0.5, trend=TrendRule(min_std=0.01))}
    xs = [0.0, 0.01, 0.02, 0.6, 0.7, 0.2, 0.9]
    det = WarningDetector(rules)
    live = [a for i, x in enumerate(xs) for a in det.update(i * 5, "a", {"fkl": x})]
    assert live == detect([i * 5 for i in range(len(xs))], "a", {"fkl": xs}, rules)
    thresholds = [a.step for a in live if a.rule == "threshold"]
    assert thresholds == [15, 30]  # crosses at 0.6, goes back at 0.2, crosses again at 0.9
    # another series keeps its own state
    assert det.update(100, "b", {"fkl": 0.6})[0].series == "b"


def test_threshold_below_and_nonfinite_skipped():
    det = WarningDetector({"acc": MetricRule(threshold=0.3, above=False)})
    assert det.update(0, "s", {"acc": 0.5}) == []
    assert det.update(1, "s", {"acc": float("nan")}) == []
    [a] = det.update(2, "s", {"acc": 0.2})
    assert a.rule == "threshold" and a.limit == 0.3 and "crossed the threshold" in a.message()


def test_warmup_and_flat_series():
    rule = MetricRule(trend=TrendRule(warmup=3, min_std=0.0, rel_std=0.1))
    # a flat series, then a 5% wiggle: inside the relative floor, no alert
    assert detect(range(6), "s", {"m": [1.0, 1.0, 1.0, 1.05, 1.0, 0.99]}, {"m": rule}) == []
    # a jump on the second point is before warm-up; on the fourth it fires
    assert detect(range(3), "s", {"m": [1.0, 5.0, 5.0]}, {"m": rule}) == []
    alerts = detect(range(5), "s", {"m": [1.0, 1.0, 1.0, 5.0, 5.0]}, {"m": rule})
    assert [a.step for a in alerts] == [3] and alerts[0].score > 3
    assert first_alert(alerts, "m").step == 3 and first_alert(alerts, "other") is None


@pytest.mark.parametrize("kwargs, match", [
    ({"alpha": 0}, "alpha"), ({"alpha": 1.5}, "alpha"), ({"z": -1}, "z"), ({"warmup": 0}, "warmup"),
    ({"min_std": 0, "rel_std": 0}, "min_std"), ({"direction": "sideways"}, "direction"), ({"z": float("nan")}, "z"),
])
def test_trend_rule_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrendRule(**kwargs)


def test_metric_rule_roundtrip():
    r = MetricRule(threshold=0.1, trend=TrendRule(z=4.0), above=False)
    assert MetricRule.from_dict(r.to_dict()) == r
    assert not MetricRule().active


def binom_tail(lost, gained):
    n = lost + gained
    return sum(math.comb(n, k) for k in range(lost, n + 1)) / 2**n


def test_mcnemar_exact():
    before = np.array([1] * 10 + [0] * 10, dtype=bool)
    after = before.copy()
    assert mcnemar_drop_pvalue(before, after) == 1.0
    after[:6] = False  # 6 lost, none gained
    assert mcnemar_drop_pvalue(before, after) == pytest.approx(1 / 64)
    after[10:12] = True  # 2 gained
    assert mcnemar_drop_pvalue(before, after) == pytest.approx(binom_tail(6, 2))
    # gains only: no drop
    assert mcnemar_drop_pvalue(np.zeros(5, bool), np.ones(5, bool)) == 1.0
    with pytest.raises(ValueError):
        mcnemar_drop_pvalue(np.ones(3), np.ones(4))


@pytest.mark.parametrize(("lost", "gained"), [(1100, 1000), (600, 500), (2000, 1800), (40, 3000)])
def test_mcnemar_exact_past_a_thousand_discordant_items(lost, gained):
    """n > 1024 discordant items: 2.0**n overflowed a float (issue 15); the exact tail in integers agrees."""
    n_items = lost + gained + 500
    before = np.zeros(n_items, dtype=bool)
    after = np.zeros(n_items, dtype=bool)
    before[:lost] = True  # solved at the start, failed later
    after[lost:lost + gained] = True  # the reverse
    before[-250:] = after[-250:] = True  # concordant items do not count
    got = mcnemar_drop_pvalue(before, after)
    want = binom_tail(lost, gained)  # Python integers: exact, then one division
    assert 0.0 <= got <= 1.0
    assert got == pytest.approx(want, rel=1e-9, abs=1e-300)


def test_drop_points_and_lead():
    start = np.array([1] * 20 + [0] * 30, dtype=bool)
    later = [start.copy() for _ in range(4)]
    later[1][:2] = False  # 2 lost: p = 0.25
    later[2][:5] = False  # 5 lost: p = 1/32
    later[3][:9] = False  # 9 lost: p = 1/512
    pts = drop_points([0, 5, 10, 15, 20], [start, *later])
    assert [p.pvalue for p in pts] == pytest.approx([1.0, 1.0, 0.25, 1 / 32, 1 / 512])
    # Holm over the 4 evaluations after the start: 4/512, then max(., 3/32), max(., 2/4), 1
    assert [p.adjusted for p in pts] == pytest.approx([1.0, 1.0, 0.5, 3 / 32, 4 / 512])
    # uncorrected, step 15 (p = 1/32 < 0.05) would be "the first drop"; corrected, it is step 20
    assert [p.significant for p in pts] == [False, False, False, False, True]
    assert pts[3].lost == 5 and pts[0].accuracy == pytest.approx(0.4)
    drop = first_drop(pts)
    assert drop.step == 20
    assert lead_time(drop.step, 5) == 15 and lead_time(drop.step, 25) == -5
    assert lead_time(None, 5) is None and lead_time(15, None) is None
    # unordered steps are sorted, the first (step 0) is the baseline; one test needs no correction
    pts2 = drop_points([15, 0], [later[2], start])
    assert [p.step for p in pts2] == [0, 15] and pts2[1].significant and pts2[1].adjusted == pytest.approx(1 / 32)


def naive_holm(ps, alpha):
    """Holm's procedure as stated: reject the ascending p_(1), p_(2), ... while p_(i) <= alpha / (m - i + 1)."""
    m = len(ps)
    rejected = set()
    for i, k in enumerate(sorted(range(m), key=lambda j: ps[j])):
        if ps[k] < alpha / (m - i):
            rejected.add(k)
        else:
            break
    return rejected


def test_holm_adjusted_matches_the_step_down_procedure():
    rng = random.Random(3)
    for _ in range(300):
        m = rng.randint(1, 12)
        ps = [rng.choice([rng.random(), rng.random() * 0.02, 1.0]) for _ in range(m)]
        adj = holm_adjusted(ps)
        assert all(a >= p - 1e-15 and a <= 1.0 for a, p in zip(adj, ps, strict=True))
        for alpha in (0.01, 0.05, 0.2):
            assert {i for i, a in enumerate(adj) if a < alpha} == naive_holm(ps, alpha)
    with pytest.raises(ValueError):
        holm_adjusted([0.5, 1.5])


def test_repeated_uncorrected_tests_find_drops_in_noise_and_holm_does_not():
    """No real drop: every evaluation re-draws which of 40 items the same-skill model solves.
    Uncorrected, the first of 20 tests at 0.05 declares a drop in many stages; Holm keeps it near alpha."""
    rng = np.random.default_rng(0)
    stages, raw_hits, holm_hits = 400, 0, 0
    for _ in range(stages):
        evals = [rng.random(40) < 0.5 for _ in range(21)]
        pts = drop_points(list(range(21)), evals)
        raw_hits += any(p.pvalue < 0.05 for p in pts[1:])
        holm_hits += first_drop(pts) is not None
    # the old rule's false-drop rate: measured 119 / 400 = 0.30, six times alpha (the claim: well above 3 alpha)
    assert raw_hits / stages > 3 * 0.05
    assert holm_hits / stages <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / stages)


def test_min_items():
    assert min_items(0.05, 1) == 5  # ½⁴ = 0.0625 is not < 0.05; ½⁵ is
    assert min_items(0.05, 3) == 6  # α / 3 = 0.0167: ½⁶ = 0.0156
    assert min_items(0.05, 10) == 8
    for alpha in (0.01, 0.05, 0.1):
        for m in range(1, 40):
            n = min_items(alpha, m)
            assert 0.5**n < alpha / m <= 0.5 ** (n - 1)
    # with min_items items, losing them all is a significant drop; with one fewer it never is
    n = min_items(0.05, 4)
    start = np.ones(n, dtype=bool)
    assert first_drop(drop_points([0, 1, 2, 3, 4], [start] * 4 + [np.zeros(n, bool)])) is not None
    start = np.ones(n - 1, dtype=bool)
    assert first_drop(drop_points([0, 1, 2, 3, 4], [start] * 4 + [np.zeros(n - 1, bool)])) is None
    with pytest.raises(ValueError):
        min_items(0.05, 0)


def test_latest_rows_resumed_session_supersedes():
    data = {"session": np.array([0, 0, 0, 0, 1, 1]), "step": np.array([0, 5, 10, 15, 10, 15]),
            "x": np.array([0.0, 0.5, 1.0, 1.5, 9.0, 9.5])}
    sessions = {"session": np.array([0, 1]), "step": np.array([0, 10])}
    out = latest_rows(data, sessions)
    assert out["step"].tolist() == [0, 5, 10, 15]
    assert out["x"].tolist() == [0.0, 0.5, 9.0, 9.5]
    # a fresh start (session 2 from step 0) replaces everything
    sessions2 = {"session": np.array([0, 1, 2]), "step": np.array([0, 10, 0])}
    data2 = {k: np.concatenate([v, [2, 0, 7.0][i:i + 1]]) for i, (k, v) in enumerate(data.items())}
    assert latest_rows(data2, sessions2)["x"].tolist() == [7.0]


# --- the [monitor] section ------------------------------------------------------------------

CONFIG = """\
[run]
name = "m"

[[stages]]
domain = "math"
phases = ["sft"]
[stages.sft]
n = 4

[[stages]]
domain = "search"
phases = ["sft"]
[stages.sft]
n = 4
"""


def test_monitor_section_parsed():
    cfg = parse_config(CONFIG + """
[monitor]
every_n_steps = 3
on_warning = "stop"
probe_n = 8
[monitor.thresholds]
fkl = 0.2
kl_high = 0.4
fkl_high = "off"
[monitor.trend]
metrics = ["kl_high", "fkl"]
z = 4.0
min_std = { fkl = 0.01 }
""")
    m = cfg.monitor
    assert m.every_n_steps == 3 and m.on_warning == "stop" and m.probe_n == 8
    assert m.rules["fkl"].threshold == 0.2 and m.rules["fkl"].trend.z == 4.0 and m.rules["fkl"].trend.min_std == 0.01
    assert m.rules["kl_high"].threshold == 0.4 and m.rules["kl_high"].trend.z == 4.0
    assert "fkl_high" not in m.rules  # its only rule was turned off
    assert m.rules.get("kl_all") is None or m.rules["kl_all"].trend is None
    assert parse_config(CONFIG).monitor is None
    assert m.razor  # RL's Razor's own probe (the trained stage's prompts) is on by default
    assert parse_config(CONFIG + "\n[monitor]\nrazor = false\n").monitor.razor is False


@pytest.mark.parametrize("section, line, match", [
    ("[monitor]\nrazor = \"yes\"\n", 17, "`razor` must be true or false"),
    ("[monitor]\nevery_n_step = 3\n", 17, "did you mean 'every_n_steps'"),
    ("[monitor]\non_warning = \"halt\"\n", 17, "on_warning"),
    ("[monitor]\nstages = [\"ecom\"]\n", 17, "not a stage domain"),
    ("[monitor]\n[monitor.thresholds]\nkl_hgh = 0.3\n", 18, "did you mean 'kl_high'"),
    ("[monitor]\n[monitor.trend]\nz = -2\n", 17, "z"),
    ("[monitor]\nevery_n_steps = 0\n", 17, ">= 1"),
    ("[monitor]\nhigh = \"q=2\"\n", 17, "q"),
])
def test_monitor_section_errors_name_the_line(section, line, match):
    with pytest.raises(ConfigError, match=match) as e:
        parse_config(CONFIG + "\n" + section, "cfg.toml")
    assert f"cfg.toml, line {line}" in str(e.value) or "cfg.toml" in str(e.value)
    assert "\n" not in str(e.value)


def _probe(name="p"):
    from aclarena.results.probes import ProbeSet

    ids = [np.array([1, 2, 3, 4])]
    return ProbeSet(name=name, reference="ref", ids=ids, scored=[np.array([False, False, True, True])], texts=["x"],
                    token_text=[["a", "b", "c", "d"]], sources=[{}])


@pytest.mark.parametrize("kwargs, match", [
    ({"every_n_steps": 0}, "every_n_steps"),
    ({"every_n_steps": 2.5}, "every_n_steps"),
    ({"high": "q=7"}, "q"),
    ({"on_warning": "stopp"}, "did you mean 'stop'"),
    ({"on_store_error": "ignore"}, "on_store_error"),
    ({"rules": {"kl_hi": MetricRule(threshold=1.0)}}, "did you mean 'kl_high'"),
    ({"references": {"q": "x"}}, "unknown probe set"),
    ({"batch_size": 0}, "batch_size"),
    ({"label": "../x"}, "label"),
])
def test_callback_validates_arguments(kwargs, match):
    from aclarena.train.callbacks import DriftMonitorCallback

    with pytest.raises(AclarenaError, match=match):
        DriftMonitorCallback([_probe()], **kwargs)


def test_callback_needs_distinct_probe_sets():
    from aclarena.train.callbacks import DriftMonitorCallback

    with pytest.raises(AclarenaError, match="at least one"):
        DriftMonitorCallback([])
    with pytest.raises(AclarenaError, match="repeat"):
        DriftMonitorCallback([_probe(), _probe()])
    with pytest.raises(AclarenaError, match="ProbeSet"):
        DriftMonitorCallback(["math"])


def test_drop_reachable_agrees_with_min_items_and_labels_say_why_there_is_no_drop():
    for tests in (1, 3, 10, 21):
        n = min_items(0.05, tests)
        assert drop_reachable(n, 0.05, tests) and not drop_reachable(n - 1, 0.05, tests)
    assert drop_label(95) == "95"
    assert drop_label(None) == "none" and drop_label(None, True) == "none"
    assert drop_label(None, False) == "unreachable"
    result = {"drop_test": {"domains": {"math": {"reachable": False}, "search": {"reachable": True}}}}
    assert drop_reachable_in(result, "math") is False and drop_reachable_in(result, "search") is True
    assert drop_reachable_in(result, "ecom") is None and drop_reachable_in({}, "math") is None


def test_monitor_settings_are_validated_once_and_the_callback_trusts_them():
    from aclarena.diagnostics.token_drift import HighEntropy
    from aclarena.train.callbacks import DriftMonitorCallback
    from aclarena.train.monitor_spec import MonitorSettings

    spec = parse_config(CONFIG + "\n[monitor]\nevery_n_steps = 3\non_warning = \"stop\"\nhigh = \"nats=1.5\"\n").monitor
    settings = spec.callback
    assert isinstance(settings, MonitorSettings)
    assert (settings.every_n_steps, settings.on_warning, settings.high_entropy) == (3, "stop", HighEntropy.parse("nats=1.5"))
    assert dict(settings.rules) == dict(spec.rules)
    cb = DriftMonitorCallback([_probe()], settings=settings)
    assert cb.monitor_settings is settings
    assert (cb.every_n_steps, cb.on_warning, cb.high, cb.rules) == (3, "stop", settings.high, dict(spec.rules))
    # the loose keywords build the same object
    assert DriftMonitorCallback([_probe()], every_n_steps=3, on_warning="stop", high="nats=1.5",
                                rules=spec.rules).monitor_settings == settings
    with pytest.raises(AclarenaError, match="not both"):
        DriftMonitorCallback([_probe()], settings=settings, every_n_steps=4)
    with pytest.raises(ConfigError, match=r"^on_warning must be one of log, save, stop, got 'halt'$"):
        MonitorSettings(on_warning="halt")
    with pytest.raises(ConfigError, match=r"^every_n_steps must be an integer >= 1, got 0$"):
        MonitorSettings(every_n_steps=0)
    with pytest.raises(ConfigError, match="on_warning must be one of"):
        dataclasses.replace(spec, on_warning="halt")  # a changed spec is validated again
