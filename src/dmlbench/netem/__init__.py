"""Emulated networks: named profiles (data) and namespaces + veth + bridge + tc (code)."""

from dmlbench.netem.host import NetworkError, leftovers, remove_stale
from dmlbench.netem.profiles import NetworkSpec, ResolvedNetwork, load_profiles
from dmlbench.netem.topology import Topology

__all__ = [
    "NetworkError",
    "NetworkSpec",
    "ResolvedNetwork",
    "Topology",
    "leftovers",
    "load_profiles",
    "remove_stale",
]
