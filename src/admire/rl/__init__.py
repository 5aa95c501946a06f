"""Reinforcement learning: rollouts, advantages and the CPU trainer.

Import the submodules directly (``admire.rl.advantages``); this package imports nothing at load time so
that the pure method (advantages) never pulls in torch through it.
"""
