"""Emulated networks: profiles, namespaces and tc for real (as root), nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmlbench.errors import SpecError
from dmlbench.netem import NetworkSpec, Topology, load_profiles
from dmlbench.netem.profiles import ResolvedNetwork, parse_rate, parse_time


def test_units_parse_like_tc() -> None:
    assert parse_rate("100mbit") == 1e8
    assert parse_rate("2.5gbit") == 2.5e9
    assert parse_time("5ms") == pytest.approx(0.005)
    assert parse_time("50us") == pytest.approx(5e-5)
    for bad in ("fast", "0mbit", "-1gbit", "100"):
        with pytest.raises(SpecError, match="not a positive rate"):
            parse_rate(bad)
    with pytest.raises(SpecError, match="not a time"):
        parse_time("soon")


def test_profiles_are_data_and_inline_values_override_them(tmp_path: Path) -> None:
    profiles = load_profiles()
    assert {"1gbit", "10gbit", "25gbit-cloud", "100gbit-ib", "wan-20ms"} <= set(profiles)
    wan = NetworkSpec(profile="wan-20ms").resolve()
    assert (wan.rate_bps, wan.delay_s) == (1e9, pytest.approx(0.02))
    mixed = NetworkSpec(profile="wan-20ms", latency="5ms").resolve()
    assert mixed.delay_s == pytest.approx(0.005) and mixed.name == "wan-20ms+custom"
    assert NetworkSpec(bandwidth="100mbit").resolve().describe() == "custom · 100 Mbit/s"
    with pytest.raises(SpecError, match="did you mean '10gbit'"):
        NetworkSpec(profile="10gbt").resolve()
    mine = tmp_path / "nets.yaml"
    mine.write_text("lab: {bandwidth: 40gbit}\nbroken: {description: nothing}\n")
    with pytest.raises(SpecError, match=r"'broken'.*needs a bandwidth or latency"):
        NetworkSpec(profile="lab", profiles_file=str(mine)).resolve()
    mine.write_text("lab: {bandwidth: 40gbit}\nbad: {bandwidth: lots}\n")
    with pytest.raises(SpecError, match=r"network profile 'bad' in .*nets.yaml: bandwidth 'lots'"):
        load_profiles(mine)  # which entry of which file: it named neither
    mine.write_text("lab: {bandwith: 40gbit, latency: 1ms}\n")  # was dropped unsaid
    with pytest.raises(SpecError, match=r"'lab' in .*: unknown key 'bandwith' \(did you mean"):
        load_profiles(mine)


def test_network_takes_a_profile_or_a_bare_rate_as_simulate_does(dmlbench) -> None:
    """`run --network 250mbit` was refused as an unknown profile ("did you mean
    '100mbit'?") where `simulate` and `advise` take a bare rate."""
    from dmlbench.netem.profiles import network_option

    assert network_option("250mbit") == {"bandwidth": "250mbit"}
    assert network_option("1gbit") == {"profile": "1gbit"}  # a profile's name first
    assert network_option("5gbit-lab") == {"profile": "5gbit-lab"}  # no rate: a name
    assert network_option(None) is None
    code, out, _ = dmlbench("run", "digits-mlp", "-w", "2", "--network", "250mbit", "--dry-run")
    assert code == 0 and "custom · 250 Mbit/s" in out


def test_names_say_which_launcher_made_them() -> None:
    from dmlbench.netem.host import _creator

    # pid 8978 is "6xe" in base 36: an "x" that once cut it to pid 6, alive forever
    assert _creator("6xe_1") == 8978 and _creator("6xex1") == 8978  # new, and old names
    assert Topology(2, ResolvedNetwork(name="t", rate_bps=None)).tag.count("_") == 1


def test_the_name_prefix_is_four_safe_characters(monkeypatch: pytest.MonkeyPatch) -> None:
    from dmlbench.netem.host import PREFIX_ENV, NetworkError, _names, prefix

    monkeypatch.setenv(PREFIX_ENV, "dmlc")
    assert prefix() == "dmlc" and _names().match("dmlc2jmj4_1br")
    assert not _names().match("dmlb2jmj4_1br")  # another prefix's: not this process's
    for bad in ("dm", "dmlbx", "Dmlb", "dm/b", "1mlb", "dm\nb"):
        monkeypatch.setenv(PREFIX_ENV, bad)
        with pytest.raises(NetworkError, match=PREFIX_ENV):
            prefix()
    monkeypatch.delenv(PREFIX_ENV)
    assert prefix() == "dmlb"


def _planned(out: str) -> list[tuple[dict, dict]]:
    """Each planned run's network and model, from a `--json` plan."""
    return [(r["spec"]["network"], r["spec"]["recipe"]["model"]) for r in json.loads(out)["runs"]]


def test_a_network_or_a_model_is_named_as_its_option_takes_it(dmlbench, tmp_path) -> None:
    """`--set network=1gbit`, and `network: [1gbit, 100mbit]` as a sweep's axis, were
    refused ("Input should be a valid dictionary or instance of NetworkSpec"), and
    `model: linear` likewise: they take what --network and --model take, keeping the
    network's other keys and, for the recipe's own model, its options."""
    lists = ["--network", "1gbit,250mbit", "--model", "mlp,linear"]
    code, out, err = dmlbench(
        "run", "-w", "2", *lists, "--set", "network.latency=5ms", "--dry-run", "--json"
    )
    assert code == 0, err
    link = {"intra_bandwidth": None, "intra_latency": None, "profiles_file": None}
    gbit = {"profile": "1gbit", "bandwidth": None, "latency": "5ms", **link}
    rate = {"profile": "none", "bandwidth": "250mbit", "latency": "5ms", **link}
    mlp, linear = {"name": "mlp", "options": {"hidden": [128]}}, {"name": "linear", "options": {}}
    assert _planned(out) == [(gbit, mlp), (gbit, linear), (rate, mlp), (rate, linear)]
    sweep = tmp_path / "nets.yaml"
    sweep.write_text("task: digits-mlp\naxes: {network: [1gbit, 250mbit], model: [linear]}\n")
    code, out, err = dmlbench("sweep", str(sweep), "--plan", "--json")
    assert code == 0, err
    assert _planned(out) == [({**link_, "latency": None}, linear) for link_ in (gbit, rate)]
    for key, value, shown in (
        ("network", "100mbit", "100mbit · 100 Mbit/s"),
        ("model", "mlp", "closed division"),
    ):
        code, out, err = dmlbench("run", "--set", f"{key}={value}", "--dry-run")
        assert code == 0 and shown in out, err
    code, _, err = dmlbench("run", "--set", "network=nope", "--dry-run")
    assert code == 2 and "unknown network profile 'nope'" in err


def test_a_spec_file_names_a_model_or_a_network_as_set_does(dmlbench, tmp_path) -> None:
    """A spec file's `recipe: {model: mlp}` dropped the recipe's own options (an open
    run, hidden=None), and after `network: 100mbit` a `--set network.latency=5ms` was
    an unknown key: a spec file's bare name takes the rule --set has."""
    model = tmp_path / "model.yaml"
    model.write_text("task: digits-mlp\nrecipe: {model: mlp}\n")
    network = tmp_path / "network.yaml"
    network.write_text("task: digits-mlp\nnetwork: 100mbit\n")
    code, out, err = dmlbench(
        "run", "-c", str(model), "-c", str(network), "--set", "network.latency=5ms",
        "--dry-run", "--json",
    )  # fmt: skip
    assert code == 0, err
    spec = json.loads(out)["spec"]
    assert spec["recipe"]["model"] == {"name": "mlp", "options": {"hidden": [128]}}
    assert (spec["network"]["profile"], spec["network"]["latency"]) == ("100mbit", "5ms")
    model.write_text("task: digits-mlp\nrecipe: {model: linear}\n")
    code, out, err = dmlbench("run", "-c", str(model), "--dry-run", "--json")
    assert code == 0, err
    assert json.loads(out)["spec"]["recipe"]["model"] == {"name": "linear", "options": {}}
