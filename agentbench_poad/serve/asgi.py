"""An ASGI entry point for process managers: ``uvicorn agentbench_poad.serve.asgi:app``.

Serves the id named by the ``ENV_ID`` environment variable (default
``Overcooked-TomatoSalad-v0``) with the server's defaults; ``agentbench-poad serve`` is the
usual way in (it validates the id and sets the WebSocket message limit).
"""

from __future__ import annotations

import os

from agentbench_poad.serve.app import make_app

app = make_app(os.environ.get("ENV_ID", "Overcooked-TomatoSalad-v0"))
