"""ADMIRE: reinforcement learning for GUI agents with adaptive milestone rewards."""

__version__ = "0.1.0"
