"""A `trainplan serve` process for benchmarks.load: started from any checkout with this
interpreter on a free loopback port, its process tree's resident memory sampled meanwhile."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import http.client
from pathlib import Path

HOST = "127.0.0.1"  # loopback only, by design
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _children_map() -> dict[int, list[int]]:
    """{parent pid: child pids} of every process (from /proc/<pid>/stat)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def tree_rss_bytes(root: int) -> int:
    """Resident bytes of `root` and all its descendants (from /proc)."""
    children, total, todo = _children_map(), 0, [root]
    while todo:
        pid = todo.pop()
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
        except (OSError, IndexError, ValueError):
            continue
        todo += children.get(pid, [])
    return total


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) used so far by `root` and its descendants, counting the
    children they have reaped (/proc/<pid>/stat fields 14-17, proc(5))."""
    children, total, todo = _children_map(), 0, [root]
    while todo:
        pid = todo.pop()
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
        except (OSError, IndexError, ValueError):
            continue
        todo += children.get(pid, [])
    return total / CLOCK_TICKS


class Server:
    """`python -m service.cli serve` on a loopback port, from checkout `repo`."""

    def __init__(self, repo: Path, env: dict[str, str]) -> None:
        self.port = _free_port()
        self.repo = repo
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--host", HOST, "--port",
             str(self.port), "--log-level", "warning"], cwd=repo,
            env={**os.environ, "PYTHONPATH": str(repo), **env})
        self.peak_rss_bytes = 0
        self._stop = threading.Event()
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak_rss_bytes = max(self.peak_rss_bytes, tree_rss_bytes(self.proc.pid))
            time.sleep(0.5)

    def wait_ready(self, limit_s: float = 120) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            conn = http.client.HTTPConnection(HOST, self.port, timeout=2)
            try:
                conn.request("GET", "/readyz")
                if conn.getresponse().status == 200:
                    return
            except (OSError, http.client.HTTPException):
                pass
            finally:
                conn.close()
            if self.proc.poll() is not None:
                break
            time.sleep(0.3)
        raise SystemExit(f"server from {self.repo} did not become ready")

    def cpu_s(self) -> float:
        """CPU seconds the server's process tree has used so far."""
        return tree_cpu_s(self.proc.pid)

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
