"""Advice: the gradient noise scale measured in runs, and what it says about the batch."""

from dmlbench.noise import NoiseScale, NoiseScaleMeter, noise_scale_estimate

__all__ = ["NoiseScale", "NoiseScaleMeter", "noise_scale_estimate"]
