"""ADMIRE on verl + Ray: stepwise samples, ADMIRE's advantage estimators, the reward manager, the GUI agent loop
and the trainer, registered in verl by :mod:`admire.integrations.verl.plugin` (a ``verl.plugins`` entry point).

Importing this package imports nothing from verl: each module imports verl itself, so ``admire`` without the
``verl`` extra still imports, and a missing extra is one line naming ``pip install 'admire[verl]'``.
"""
