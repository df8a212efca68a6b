"""TensorFlow servers on this machine, one process each, for tests and demos.

:class:`LocalCluster` starts ``tf.distribute.Server`` processes on free
ports of this machine, each exposing ``device_count`` CPU devices
(``tf.compat.v1.ConfigProto(device_count={"CPU": k})``; logical-device
configuration inside a server process is not exposed to its clients), waits
until they accept connections and always stops them.  :func:`serve` is the
server process: ``python -m tf_tofu.core.local_cluster --serve ...``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Optional, Sequence

import tensorflow as tf

from tf_tofu.core.cluster import (JOB_NAME, ClusterError, cluster_devices, cluster_spec_of,
                                  probe)


def _free_ports(host: str, n: int) -> list[int]:
  """``n`` distinct ports nobody listens on now (bound to port 0, then released)."""
  socks = []
  try:
    for _ in range(n):
      s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
      s.bind((host, 0))
      socks.append(s)
    return [s.getsockname()[1] for s in socks]
  finally:
    for s in socks:
      s.close()


def _tail(path: str, lines: int = 15) -> str:
  try:
    with open(path, errors="replace") as f:
      return "".join(f.readlines()[-lines:]).rstrip() or "(empty)"
  except OSError:
    return "(unreadable)"


class LocalCluster:
  """``tasks`` TensorFlow servers on this machine, one process each, for tests and demos.

  ``with LocalCluster(2, 2) as c:`` starts ``tasks`` ``tf.distribute.Server``
  processes of job ``job`` on free ports of ``host`` (picked at run time), each
  exposing ``devices_per_task`` CPU devices, and waits (at most
  ``startup_timeout_s``) until every port accepts connections; leaving the
  block (normally, by an exception or by KeyboardInterrupt) terminates them,
  and kills those that do not stop.  A server also exits by itself when the
  process that started it dies.  Its stdout is discarded; its stderr is kept
  for error messages.  TensorFlow's server listens on every interface
  (``0.0.0.0:port``), not only on ``host``: run it where the ports are private.
  """

  def __init__(self, tasks: int, devices_per_task: int, job: str = "worker",
               host: str = "127.0.0.1", startup_timeout_s: float = 60.0):
    for name, v in (("tasks", tasks), ("devices_per_task", devices_per_task)):
      if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ClusterError(f"{name}={v!r}: need a positive int")
    if not JOB_NAME.match(job):
      raise ClusterError(f"job name {job!r} is not a letter followed by letters, digits or '_'")
    self.tasks, self.devices_per_task, self.job, self.host = tasks, devices_per_task, job, host
    self.startup_timeout_s = startup_timeout_s
    self.processes: tuple[subprocess.Popen, ...] = ()
    self._logs: list[str] = []
    self._spec: Optional[tf.train.ClusterSpec] = None

  # The addresses, spec and devices exist once the servers have been started.
  @property
  def cluster_spec(self) -> tf.train.ClusterSpec:
    if self._spec is None:
      raise ClusterError("the LocalCluster is not started; use it as `with LocalCluster(...)`")
    return self._spec

  @property
  def addresses(self) -> tuple[str, ...]:
    return tuple(self.cluster_spec.job_tasks(self.job))

  @property
  def devices(self) -> tuple[str, ...]:
    return cluster_devices(self.cluster_spec, self.devices_per_task)

  def tf_config(self, task_index: int = 0) -> str:
    """The ``TF_CONFIG`` JSON of task ``task_index`` of this cluster."""
    return json.dumps({"cluster": self.cluster_spec.as_dict(),
                       "task": {"type": self.job, "index": task_index}})

  def _server_command(self, task: int) -> list[str]:
    """The command line of the server process of ``task``."""
    return [sys.executable, "-m", __name__ if __name__ != "__main__" else "tf_tofu.core.local_cluster",
            "--serve", "--cluster_spec", json.dumps(self.cluster_spec.as_dict()),
            "--job", self.job, "--task", str(task), "--cpus", str(self.devices_per_task),
            "--parent_pid", str(os.getpid())]

  def _spawn(self) -> None:
    ports = _free_ports(self.host, self.tasks)
    self._spec = tf.train.ClusterSpec({self.job: [f"{self.host}:{p}" for p in ports]})
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    env.pop("TF_CONFIG", None)
    procs = []
    for task in range(self.tasks):
      fd, log = tempfile.mkstemp(prefix=f"tofu_server_{task}_", suffix=".log")
      self._logs.append(log)
      with os.fdopen(fd, "w") as err:
        procs.append(subprocess.Popen(self._server_command(task), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=err, env=env))
      self.processes = tuple(procs)

  def _wait_until_up(self) -> None:
    """Returns when every server accepts connections; a ClusterError if one exits or the
    time is up (naming its address, with the end of its stderr)."""
    deadline = time.monotonic() + self.startup_timeout_s
    waiting = dict(enumerate(self.addresses))
    while waiting:
      for task, address in list(waiting.items()):
        code = self.processes[task].poll()
        if code is not None:
          raise ClusterError(f"the server of task {task} at {address} exited with code {code} "
                             f"before it accepted connections; its stderr ends:\n"
                             f"{_tail(self._logs[task])}")
        if probe(address, 0.25) is None:
          del waiting[task]
      if waiting and time.monotonic() > deadline:
        task, address = next(iter(waiting.items()))
        raise ClusterError(f"the server(s) at {list(waiting.values())} did not accept "
                           f"connections within {self.startup_timeout_s:g} s; the stderr of "
                           f"task {task} at {address} ends:\n{_tail(self._logs[task])}")
      if waiting:
        time.sleep(0.05)

  def start(self) -> "LocalCluster":
    """Starts the servers and waits until they are up (one retry with new ports when a
    port was taken in between); stops them all on any failure."""
    if self.processes:
      raise ClusterError("the LocalCluster is already started")
    for attempt in range(2):
      try:
        self._spawn()
        self._wait_until_up()
        return self
      except ClusterError as e:
        self.close()
        if attempt or "Could not start gRPC server" not in str(e):
          raise
      except BaseException:
        self.close()
        raise
    raise AssertionError("unreachable")

  def close(self, grace_s: float = 5.0) -> None:
    """Terminates every server, kills those still running after ``grace_s``, reaps them."""
    procs, self.processes = self.processes, ()
    for p in procs:
      if p.poll() is None:
        p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
      try:
        p.wait(timeout=max(0.0, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    for log in self._logs:
      try:
        os.unlink(log)
      except OSError:
        pass
    self._logs = []

  def __enter__(self) -> "LocalCluster":
    return self.start()

  def __exit__(self, *exc) -> None:
    self.close()

  def __del__(self):
    try:
      if getattr(self, "processes", ()):
        self.close(grace_s=1.0)
    except Exception:  # noqa: BLE001 - interpreter shutdown
      pass


def _exit_with_parent(parent_pid: int) -> None:
  """Ends this process (at once) when the process that started it is gone."""

  def watch():
    while os.getppid() == parent_pid:
      time.sleep(0.5)
    os._exit(0)

  threading.Thread(target=watch, name="tf_tofu-parent-watch", daemon=True).start()


def serve(argv: Optional[Sequence[str]] = None) -> None:
  """The server process of :class:`LocalCluster`: ``python -m tf_tofu.core.local_cluster --serve
  --cluster_spec JSON --job worker --task 0 --cpus 2``; runs until it is terminated."""
  parser = argparse.ArgumentParser(prog="python -m tf_tofu.core.local_cluster")
  parser.add_argument("--serve", action="store_true", required=True)
  parser.add_argument("--cluster_spec", required=True, help="JSON {job: [host:port, ...]}")
  parser.add_argument("--job", default="worker")
  parser.add_argument("--task", type=int, default=0)
  parser.add_argument("--cpus", type=int, default=1, help="CPU devices this server exposes")
  parser.add_argument("--parent_pid", type=int, default=0, help="exit when this process ends")
  args = parser.parse_args(argv)
  if args.parent_pid:
    _exit_with_parent(args.parent_pid)
  server = tf.distribute.Server(
      cluster_spec_of(args.cluster_spec), job_name=args.job, task_index=args.task,
      config=tf.compat.v1.ConfigProto(device_count={"CPU": args.cpus}), start=True)
  server.join()


__all__ = ["LocalCluster", "serve"]


if __name__ == "__main__":
  serve()
