"""The HTTP API of `pipeframe serve` and `pipeframe dev`: Tinybird-compatible endpoints, the Events API, the views
API and an OpenAPI document generated from the endpoints' typed parameters, on FastAPI + uvicorn over one Project.

`service` holds what is served, `auth` the tokens, `routes` the pipes/events/views routes, `openapi` the document,
`errors` the error shapes, `app` the app and the server that runs it.
"""

from pipeframe.server.app import RunningServer, create_app, run_forever, serve_forever, start_server
from pipeframe.server.service import BackgroundJob, Service, Snapshot

__all__ = ["BackgroundJob", "RunningServer", "Service", "Snapshot", "create_app", "run_forever", "serve_forever",
           "start_server"]
