"""Adapters that run ADMIRE inside other trainers: verl + Ray (``admire.integrations.verl``) and TRL
(``admire.integrations.trl``)."""
