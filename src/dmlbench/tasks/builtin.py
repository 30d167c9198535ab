"""Importing this module registers every built-in task."""

from dmlbench.tasks import cifar10, epsilon, imagenet, language, small  # noqa: F401
