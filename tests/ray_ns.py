"""A two-node Ray cluster inside a network namespace that has only `lo`, for the cluster tests
and bench/cluster.py (../shared/recipes/ray: never run Ray on the bare host, where it binds
every interface). Needs root and iproute2. `cleanup()` removes Ray, every process in the
namespace and the namespace itself; call it in a finally/trap."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

BIN = Path(sys.executable).parent
NS = f"inferdray{os.getpid()}"
PORT = 8000
URL = f"http://127.0.0.1:{PORT}"
CLONE_NEWNET = 0x40000000


def sh(*cmd: str, ns: bool = True, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    full = (["ip", "netns", "exec", NS] if ns else []) + list(cmd)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PATH": f"{BIN}:{os.environ['PATH']}"}
    r = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=env)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(full)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r


def in_ns(fn, *args, **kw):
    """Run fn in a thread that joined the namespace's network (sockets it opens live there)."""
    out: dict = {}

    def run():
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        with open(f"/var/run/netns/{NS}") as f:
            if libc.setns(f.fileno(), CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns failed")
        try:
            out["value"] = fn(*args, **kw)
        except BaseException as e:  # re-raised in the caller
            out["error"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(300)
    assert not t.is_alive(), "client thread did not finish"
    if "error" in out:
        raise out["error"]
    return out["value"]


def ns_pids() -> list[int]:
    r = sh("ip", "netns", "pids", NS, ns=False, check=False)
    return [int(p) for p in r.stdout.split()]


def cleanup() -> None:
    if NS not in sh("ip", "netns", "list", ns=False, check=False).stdout:
        return
    sh("ray", "stop", "--force", check=False, timeout=60)
    for pid in ns_pids():  # only processes inside our namespace
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    sh("ip", "netns", "del", NS, ns=False, check=False)


def start_cluster(temp_dir: Path) -> None:
    """A head and a second node (custom resource `node_b`), 2 CPUs each, in namespace NS."""
    cleanup()
    sh("ip", "netns", "add", NS, ns=False)
    sh("ip", "link", "set", "lo", "up")
    sh("ray", "start", "--head", "--node-ip-address", "127.0.0.1", "--port", "6379", "--dashboard-host",
       "127.0.0.1", "--temp-dir", str(temp_dir), "--num-cpus", "2", "--disable-usage-stats")
    # The second node: same namespace, so its dashboard-agent port must differ from the head's.
    sh("ray", "start", "--address", "127.0.0.1:6379", "--dashboard-agent-listen-port", "52366",
       "--resources", '{"node_b": 1}', "--num-cpus", "2", "--disable-usage-stats")
