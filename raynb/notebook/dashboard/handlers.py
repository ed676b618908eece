"""The dashboard's HTTP side: the page at ``<base_url>raynb/`` and the JSON API under
``<base_url>raynb/api/``, as Jupyter server handlers.

Every handler is ``@tornado.web.authenticated`` by Jupyter itself (its token, in the
URL or an ``Authorization: token ...`` header, or its login cookie): an API request
without it gets 403, the page a redirect to Jupyter's login. The POST (cancel) also
needs Jupyter's XSRF token unless it came with the API token, as Jupyter's own API does.

| method and path | answer |
| --- | --- |
| GET ``raynb/`` | the page (HTML, a small script polling the API) |
| GET ``raynb/api/status`` | nodes, workers (with CPU and memory), runs: the head's status |
| GET ``raynb/api/runs`` | ``{"runs": [summary, ...]}``, oldest first |
| GET ``raynb/api/runs/<name>`` | the run's record: state, params, failures, checkpoints, reports |
| GET ``raynb/api/runs/<name>/logs?rank=N|all&stream=stdout|stderr&lines=200`` | the newest lines of its output |
| POST ``raynb/api/runs/<name>/cancel`` | 202: the head cancels it on every rank |

Errors are JSON ``{"message": ...}``: 400 for a bad parameter, 404 for an unknown run
(with ``runs``, the names the cluster has), 409 for cancelling an ended run, 503 when no
cluster runs or the head does not answer.
"""
from __future__ import annotations

import json
import re
from importlib import resources

from jupyter_server.base.handlers import APIHandler, JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import web

from .gateway import ClusterGateway, NoCluster, NoSuchRun, RunEnded


def _static(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


class DashboardPage(JupyterHandler):
    """The page: HTML with its script and style inlined, the API's base URL and the
    XSRF token in ``<meta>`` tags."""

    @web.authenticated
    def get(self) -> None:
        page = (_static("index.html")
                .replace("{{style}}", _static("dashboard.css"))
                .replace("{{script}}", _static("dashboard.js"))
                .replace("{{api}}", url_path_join(self.base_url, "raynb", "api"))
                .replace("{{xsrf}}", self.xsrf_token.decode("ascii")))
        self.set_header("Cache-Control", "no-store")
        self.finish(page)


class _Api(APIHandler):
    """Runs a gateway query off the event loop and answers it, or its error, as JSON."""

    def initialize(self, gateway: ClusterGateway) -> None:
        self.gateway = gateway

    def _reply(self, status: int, data) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(data))

    async def answer(self, fn, *args, status: int = 200) -> None:
        try:
            data = await self.gateway.call(fn, *args)
        except NoCluster as e:
            return self._reply(503, {"message": str(e)})
        except NoSuchRun as e:
            return self._reply(404, {"message": f"{e.message}; the runs it has are listed in 'runs'",
                                     "runs": e.names})
        except RunEnded as e:
            return self._reply(409, {"message": str(e)})
        except ValueError as e:
            return self._reply(400, {"message": str(e)})
        self._reply(status, data)


class StatusHandler(_Api):
    @web.authenticated
    async def get(self) -> None:
        await self.answer(self.gateway.status)


class RunsHandler(_Api):
    @web.authenticated
    async def get(self) -> None:
        await self.answer(self.gateway.run_list)


class RunHandler(_Api):
    @web.authenticated
    async def get(self, name: str) -> None:
        await self.answer(self.gateway.record, name)


class LogsHandler(_Api):
    @web.authenticated
    async def get(self, name: str) -> None:
        try:
            rank = _rank_arg(self.get_argument("rank", "0"))
            stream = _stream_arg(self.get_argument("stream", "all"))
            lines = _lines_arg(self.get_argument("lines", "200"))
        except ValueError as e:
            return self._reply(400, {"message": str(e)})
        await self.answer(self.gateway.logs, name, rank, stream, lines)


class CancelHandler(_Api):
    @web.authenticated
    async def post(self, name: str) -> None:
        await self.answer(self.gateway.cancel, name, status=202)


# A count in a query: ASCII digits only (str.isdigit() also takes '²', which int() refuses
# with Python's own message), and few enough of them to name a rank or a line count.
_COUNT = re.compile(r"^[0-9]{1,9}$")


def _rank_arg(text: str):
    if text == "all":
        return None
    if not _COUNT.match(text):
        raise ValueError(f"the parameter rank={text[:40]!r} is not a rank: give a rank number (0, 1, ...) "
                         "or 'all'")
    return int(text)


def _stream_arg(text: str):
    if text not in ("all", "stdout", "stderr"):
        raise ValueError(f"the parameter stream={text[:40]!r} is not a stream: use stdout, stderr or all")
    return None if text == "all" else text


def _lines_arg(text: str) -> int:
    if not _COUNT.match(text) or int(text) < 1:
        raise ValueError(f"the parameter lines={text[:40]!r} is not a line count: give a positive number "
                         "of lines (at most 999999999)")
    return int(text)


def handlers(base_url: str, gateway: ClusterGateway) -> list[tuple]:
    """The dashboard's routes under ``base_url`` (the Jupyter server's)."""
    root = url_path_join(base_url, "raynb")
    api = url_path_join(root, "api")
    run = url_path_join(api, "runs", "([^/]+)")
    kw = {"gateway": gateway}
    return [
        (root, web.RedirectHandler, {"url": root + "/"}),
        (root + "/", DashboardPage),
        (url_path_join(api, "status"), StatusHandler, kw),
        (url_path_join(api, "runs"), RunsHandler, kw),
        (run, RunHandler, kw),
        (url_path_join(run, "logs"), LogsHandler, kw),
        (url_path_join(run, "cancel"), CancelHandler, kw),
    ]
