"""traincast as a team service: an HTTP API (``/api/v1``), a web UI (``/``) and a shared store.

    from traincast.serve import ServeSettings, create_app
    app = create_app(ServeSettings(db="postgresql://traincast@db/traincast", tokens=("s3cret",)))

``traincast serve`` runs it on uvicorn. See docs/serve.md.
"""

from traincast.serve.app import create_app
from traincast.serve.settings import ServeSettings, load_tokens

__all__ = ["ServeSettings", "create_app", "load_tokens"]
