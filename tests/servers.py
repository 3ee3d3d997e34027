"""Real servers for the multi-machine tests, each on a free loopback port, started and stopped
by the test: PostgreSQL from Debian's `postgresql` package, and `mlflow server`."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _postgres_bin() -> Path | None:
    for candidate in [shutil.which("initdb"), *sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)]:
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve().parent
    return None


def postgres_bin_or_reason() -> tuple[Path | None, str]:
    """The PostgreSQL bin folder, installing Debian's package when we may; else why not."""
    found = _postgres_bin()
    if found is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "-o", "DPkg::Lock::Timeout=600", "postgresql"],
            capture_output=True,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        found = _postgres_bin()
    if found is None:
        return None, "PostgreSQL is not installed and Debian's postgresql package could not be installed here"
    return found, ""


@contextlib.contextmanager
def postgres_server(bin_dir: Path):
    """A throwaway cluster on 127.0.0.1 (trust auth); yields the URL of database `grpo`.
    As root, the server runs as the `postgres` user (it refuses to run as root)."""
    # its own folder under the system temp dir: pytest's folders are private to the test's user
    folder = Path(tempfile.mkdtemp(prefix="grpo-pg-"))
    data, port = folder / "pgdata", free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(folder, "postgres")

    def run(*cmd, **kw):
        return subprocess.run([*as_user, *cmd], check=True, capture_output=True, text=True, **kw)

    run(str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
    run(
        str(bin_dir / "pg_ctl"),
        "-D",
        str(data),
        "-l",
        str(folder / "server.log"),
        "-w",
        "-t",
        "60",
        "-o",
        f"-h 127.0.0.1 -p {port} -k {folder}",
        "start",
    )
    try:
        run(str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "grpo")
        yield f"postgresql://postgres@127.0.0.1:{port}/grpo"
    finally:
        subprocess.run(
            [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], capture_output=True
        )
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def mlflow_server(folder: Path):
    """`mlflow server` on 127.0.0.1 with a SQLite backend and proxied artifacts; yields its URL."""
    from grpo_core.mlflow_store import make_client

    folder.mkdir(parents=True, exist_ok=True)
    make_client(f"sqlite:///{folder}/mlflow.db")  # its tables from the template: the server skips the migrations
    port = free_port()
    log = open(folder / "mlflow-server.log", "w")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{folder}/mlflow.db",
            "--artifacts-destination",
            str(folder / "artifacts"),
            "--workers",
            "1",
        ],
        cwd=folder,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )  # as `grpo ui` starts it: no job runner
    url = f"http://127.0.0.1:{port}"
    try:
        while True:  # until it answers or exits, however long this machine takes
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"mlflow server did not start: {(folder / 'mlflow-server.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.5)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        proc.wait()
        log.close()
