"""HTTP load on a real `trainplan serve` (loopback only): throughput and latency percentiles
of POST /v1/layouts at 8 and 32 clients, /healthz latency meanwhile, and the peak resident
memory of the server's whole process tree (server, forkserver, solve workers).

Bounded: every phase runs a fixed number of requests (and stops at --max-phase-s); the
optional fuzz phase sends a fixed number of distinct random clusters (new graphs each),
which is what grows caches. Prints JSON.

Run: python -m benchmarks.load [--clients 8 32] [--requests 64] [--fuzz 0]
     [--repo PATH]  (serve the code of another checkout, e.g. the commit before a change,
                     with this interpreter: measurements side by side on one machine)
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

HOST = "127.0.0.1"  # loopback only, by design
SEED = {"model": "seed-70b", "cluster": "seed-512", "training": "seed-300b",
        "options": {"top_k": 3, "time_limit_s": 2}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def tree_rss_bytes(root: int) -> int:
    """Resident bytes of `root` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    total, todo = 0, [root]
    page = os.sysconf("SC_PAGE_SIZE")
    while todo:
        pid = todo.pop()
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, IndexError, ValueError):
            pass
        todo += children.get(pid, [])
    return total


class Server:
    """`python -m service.cli serve` on a loopback port, from `repo` (default: this one)."""

    def __init__(self, repo: Path, env: dict[str, str]) -> None:
        self.port = _free_port()
        self.base = f"http://{HOST}:{self.port}"
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
            time.sleep(0.2)

    def wait_ready(self, limit_s: float = 90) -> None:
        deadline = time.monotonic() + limit_s
        with httpx.Client(base_url=self.base, timeout=2, trust_env=False) as http:
            while time.monotonic() < deadline:
                try:
                    if http.get("/readyz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                time.sleep(0.3)
        raise SystemExit("server did not become ready")

    def stop(self) -> None:
        self._stop.set()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4) if ordered else 0.0


def phase(base: str, clients: int, bodies: list[dict], max_s: float) -> dict:
    """POST /v1/layouts `bodies` from `clients` threads; /healthz sampled meanwhile."""
    latencies: list[float] = []
    codes: dict[int, int] = {}
    stop_at = time.monotonic() + max_s
    health: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=base, timeout=10, trust_env=False) as http:
            while not done.is_set():
                t0 = time.perf_counter()
                http.get("/healthz")
                health.append(time.perf_counter() - t0)
                time.sleep(0.05)

    def client(ids: list[int]) -> None:
        with httpx.Client(base_url=base, timeout=120, trust_env=False) as http:
            for i in ids:
                if time.monotonic() > stop_at:
                    return
                t0 = time.perf_counter()
                code = http.post("/v1/layouts", json=bodies[i]).status_code
                latencies.append(time.perf_counter() - t0)
                codes[code] = codes.get(code, 0) + 1

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, [list(range(c, len(bodies), clients)) for c in range(clients)]))
    wall = time.perf_counter() - t0
    done.set()
    prober.join()
    return {"clients": clients, "requests": len(latencies), "wall_s": round(wall, 2),
            "throughput_req_s": round(len(latencies) / wall, 2), "status": codes,
            "ok_throughput_req_s": round(codes.get(200, 0) / wall, 2),
            "latency_s": {"p50": _pct(latencies, 0.5), "p90": _pct(latencies, 0.9),
                          "p99": _pct(latencies, 0.99),
                          "mean": round(statistics.fmean(latencies), 4) if latencies else 0},
            "healthz_s": {"p50": _pct(health, 0.5), "p99": _pct(health, 0.99),
                          "max": _pct(health, 1.0)}}


def fuzz_bodies(n: int, seed: int = 0) -> list[dict]:
    """`n` requests with distinct random fat-tree / NVLink-domain clusters (new graphs)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        nodes = rng.choice([16, 32, 64, 128, 256])
        if rng.random() < 0.5:
            topo = {"kind": "fat_tree", "nodes_per_leaf": rng.choice([4, 8, 16]),
                    "nics_per_node": rng.choice([1, 2, 4, 8]), "nic_gb_s": rng.uniform(10, 50),
                    "spines": rng.randint(1, 16)}
        else:
            topo = {"kind": "nvlink_domain", "nodes_per_domain": rng.choice([1, 2, 4])}
        cluster = {"name": f"fuzz-{i}", "nodes": nodes, "gpus_per_node": 8, "gpu": "h100-sxm-80gb",
                   "intra_node": {"bandwidth_gb_s": rng.uniform(100, 450), "latency_us": 3},
                   "inter_node": {"bandwidth_gb_s": rng.uniform(10, 50), "latency_us": 10},
                   "topology": topo}
        out.append({**SEED, "cluster": cluster})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--requests", type=int, default=64, help="requests per phase")
    parser.add_argument("--fuzz", type=int, default=0, help="distinct random clusters first")
    parser.add_argument("--max-phase-s", type=float, default=120.0)
    parser.add_argument("--workers", type=int, default=2, help="TRAINPLAN_MAX_CONCURRENT_SOLVES")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(args.repo, {"TRAINPLAN_DATABASE_URL": f"sqlite:///{tmp}/plans.db",
                                    "TRAINPLAN_MAX_CONCURRENT_SOLVES": str(args.workers),
                                    "TRAINPLAN_QUEUE_WAIT_S": "60",
                                    "TRAINPLAN_MAX_TIME_LIMIT_S": "60"})
        try:
            server.wait_ready()
            phase(server.base, 2, [SEED] * 4, args.max_phase_s)  # warm-up, not reported
            out: dict = {"benchmark": "POST /v1/layouts seed-70b on seed-512 top_k 3 over HTTP",
                         "repo": str(args.repo), "workers": args.workers,
                         "cpus": os.cpu_count(), "phases": []}
            if args.fuzz:
                out["fuzz"] = phase(server.base, 8, fuzz_bodies(args.fuzz), args.max_phase_s)
            for clients in args.clients:
                out["phases"].append(phase(server.base, clients, [SEED] * args.requests,
                                           args.max_phase_s))
            out["peak_tree_rss_bytes"] = server.peak_rss_bytes
        finally:
            server.stop()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
