"""A real MLflow tracking server on loopback for the Ray tests, and reads of its REST API.

The server `mlflow server` runs (MLflow's FastAPI app under uvicorn, a SQLite store), in one process: without the
CLI's parent and its job runner, which cost seconds of start-up the tests do not use. Uvicorn's access log names
every REST call made to it.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

SERVER = """
import os, sys
from mlflow.server import ARTIFACT_ROOT_ENV_VAR, BACKEND_STORE_URI_ENV_VAR
os.environ[BACKEND_STORE_URI_ENV_VAR] = sys.argv[1]
os.environ[ARTIFACT_ROOT_ENV_VAR] = sys.argv[2]
import uvicorn
uvicorn.run("mlflow.server.fastapi_app:app", host="127.0.0.1", port=int(sys.argv[3]), log_level="info")
"""


def free_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, folder: Path) -> None:
        port, self.log = free_port(), folder / "server.log"
        self.url = f"http://127.0.0.1:{port}"
        with self.log.open("w") as out:
            self.process = subprocess.Popen([sys.executable, "-c", SERVER, f"sqlite:///{folder}/store.db",
                                             str(folder / "artifacts"), str(port)], stdout=out, stderr=subprocess.STDOUT)

    def wait_until_up(self, seconds: float = 180) -> str:
        deadline = time.monotonic() + seconds
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/health", timeout=2)
                return self.url
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"the MLflow server did not start: {self.log.read_text()[-2000:]}") from None
                time.sleep(0.5)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)

    def get(self, path: str, **query) -> dict:
        with urllib.request.urlopen(f"{self.url}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query)}", timeout=30) as answer:
            return json.load(answer)

    def runs(self, experiment: str) -> list[dict]:
        experiment_id = self.get("experiments/get-by-name", experiment_name=experiment)["experiment"]["experiment_id"]
        request = urllib.request.Request(f"{self.url}/api/2.0/mlflow/runs/search", method="POST",
                                         data=json.dumps({"experiment_ids": [experiment_id]}).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.load(answer).get("runs", [])

    def history(self, run: dict, key: str) -> list[tuple[int, float]]:
        found = self.get("metrics/get-history", run_id=run["info"]["run_id"], metric_key=key)["metrics"]
        return sorted((m["step"], m["value"]) for m in found)

    def paths_called(self) -> set[str]:
        return set(re.findall(r'"(?:GET|POST) (/api/[^ ?]+)', self.log.read_text()))
