"""Jobs as Ray tasks: connecting to a cluster (or a local Ray bound to 127.0.0.1) and running
the same `run_job` there."""

from __future__ import annotations

import contextlib
import os
import sys

from ..errors import FlatformerError
from .worker import run_job


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise FlatformerError(
            f"--ray takes HOST:PORT of a cluster's head (ray start --head "
            f"prints it) or auto, got {address!r}"
        )
    return host.strip("[]"), int(port)


def _check_reachable(address: str):
    """Fail fast on a wrong HOST:PORT: ray.init keeps retrying one for minutes."""
    import socket

    try:
        socket.create_connection(_split_address(address), timeout=5).close()
    except OSError as exc:
        raise FlatformerError(
            f"cannot reach a Ray head at {address} ({exc.strerror or exc}); "
            f"start one with `ray start --head`"
        ) from None


def connect_ray(address: str, workers: int):
    """Connect to the Ray cluster at `address`, or with "auto" start a local instance of
    `workers` CPUs whose servers listen on 127.0.0.1 only and without a dashboard."""
    local = address == "auto"
    if not local:
        _check_reachable(address)
    # On Linux Ray names the node by its network address and serves on every interface; with
    # this switch (meant for single-machine Ray on macOS/Windows) it uses 127.0.0.1. It is read
    # when ray is imported, and inherited by the processes ray.init starts.
    saved = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    if local:
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    try:
        import logging

        import ray
        from ray._private import ray_constants
    except ImportError:
        raise FlatformerError("--ray needs Ray: pip install 'flatformer[ray]'") from None
    was = ray_constants.ENABLE_RAY_CLUSTER
    try:
        if local:
            ray_constants.ENABLE_RAY_CLUSTER = False  # in case ray was imported before
            ray.init(
                address="local",
                num_cpus=workers,
                include_dashboard=False,
                logging_level=logging.WARNING,
            )
        else:
            ray.init(address=address, logging_level=logging.WARNING)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        hint = (
            ""
            if local
            else (
                " (a cluster with token authentication needs "
                "RAY_AUTH_MODE=token and its token in ~/.ray/auth_token)"
            )
        )
        raise FlatformerError(
            f"cannot start or connect to Ray at {address}: {str(exc).splitlines()[0]}{hint}"
        ) from None
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = was
        if saved is None:
            os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = saved
    return ray


@contextlib.contextmanager
def _ray_session(address: str, workers: int):
    """Ray connected for the block: an existing ray.init is used as it is (and left open)."""
    # Not `import ray` first: connect_ray sets up the environment ray reads on import.
    owned = "ray" not in sys.modules or not sys.modules["ray"].is_initialized()
    ray = connect_ray(address, workers) if owned else sys.modules["ray"]
    try:
        yield
    finally:
        if owned:
            ray.shutdown()


def _run_ray(jobs: list[dict], work=run_job):
    """(job, result) pairs as Ray tasks finish, on the connected Ray; `work` (run_job, or a
    function of the same contract) runs each job."""
    import ray

    # A worker that dies mid-job (killed, its node lost) is retried: the retry resumes from the
    # job's checkpoints, and the dead worker's run-folder locks went with it.
    task = ray.remote(num_cpus=1, max_retries=3)(work)
    pending = {task.remote(job): job for job in jobs}
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            yield pending.pop(ref), ray.get(ref)
