"""Integrations with training frameworks, each an optional extra imported only on demand.

- :mod:`plasticlab.integrations.lightning`: :class:`~plasticlab.integrations.lightning.PlasticityCallback`,
  a :class:`plasticlab.Monitor` as a PyTorch Lightning callback (``pip install 'plasticlab[lightning]'``).

Nothing is imported here, so ``import plasticlab`` never imports a framework.
"""
