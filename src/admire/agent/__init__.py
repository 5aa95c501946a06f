"""Policies behind one protocol (``agent.base.Policy``): ``dom`` on the CPU, VLMs at scale."""
