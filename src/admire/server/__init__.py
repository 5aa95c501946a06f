"""The environment server: a pool of devices behind an HTTP API, a client that is itself a ``GuiEnv``,
a dashboard, and Ray actors for scale-out (DESIGN §2, ``server/``)."""
