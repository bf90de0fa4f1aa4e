"""HTTP load on real `trainplan serve` processes (loopback only), this checkout ("new") and,
side by side, the code before issue 11's worker pool ("old": a git worktree of --old-ref,
default 529325d, the parent of 1a21499 "service: solves in worker processes"), both served
by this interpreter on their own ports.

Measured, as JSON on stdout (one line per round on stderr as it goes):
* rounds: POST /v1/layouts at each --clients, `--requests` per phase, old and new phases
  interleaved (new/old, then old/new, ...) so that other load on a shared machine hits both
  alike; per round and server completed requests per second, latency p50/p95/p99, server CPU
  per request, the machine's load average at the round's start and end, and the ratio new/old
  of requests per second; per workload and client count the median ratio over the rounds.
  Workloads (benchmarks.load_problems): 'seed' repeats one problem; 'distinct' sends problems a
  capacity planner would (planner_problems: model, cluster size, GPU, network, sequence and
  batch varied), none sent twice in a run, so no worker has the problem's tables;
* healthz: /healthz latency (probe every 20 ms, one connection) while --expensive requests
  for distinct 2,048-GPU fat-tree clusters (a new graph each) run at once on each server;
* the peak resident memory of each server's process tree (server, forkserver, workers), and
  with --fuzz N, N distinct random clusters sent to the new server first (caches grow).

Bounded: a fixed number of requests per phase, each phase stops at --max-phase-s.
Clients use http.client with one keep-alive connection per client thread (cheap: the load
generator shares the machine's cores with the servers it measures).

Issue 11's throughput target (2 workers, 8 clients, distinct problems, old vs new), about
3-5 minutes on an idle 2-core machine:
    python -m benchmarks.load --workload distinct --clients 8 --workers 2 --rounds 5 --expensive 0
The whole set (both workloads at 8 and 32 clients, /healthz under load):
    python -m benchmarks.load --clients 8 32
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

from benchmarks.load_problems import SEED, Workloads
from benchmarks.load_server import HOST, Server

REPO = Path(__file__).resolve().parents[1]
OLD_REF = "529325d"  # parent of 1a21499 (issue 11's worker pool): threads under the GIL


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4) if ordered else 0.0


def _post(conn: http.client.HTTPConnection, path: str, body: bytes) -> int:
    conn.request("POST", path, body, {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    return response.status


class HealthProbe:
    """GET /healthz every `every_s` on one keep-alive connection until stopped."""

    def __init__(self, port: int, every_s: float = 0.02) -> None:
        self.port, self.every_s = port, every_s
        self.seconds: list[float] = []
        self.failed = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = http.client.HTTPConnection(HOST, self.port, timeout=10)
        while not self._done.is_set():
            t0 = time.perf_counter()
            try:
                conn.request("GET", "/healthz")
                response = conn.getresponse()
                response.read()
                ok = response.status == 200
            except (OSError, http.client.HTTPException):
                conn.close()
                ok = False
            self.seconds.append(time.perf_counter() - t0)
            self.failed += not ok
            time.sleep(self.every_s)
        conn.close()

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def summary(self) -> dict:
        return {"probes": len(self.seconds), "failed": self.failed,
                "p50_s": _pct(self.seconds, 0.5), "p99_s": _pct(self.seconds, 0.99),
                "max_s": _pct(self.seconds, 1.0),
                "over_100ms": sum(s >= 0.1 for s in self.seconds)}


def phase(port: int, clients: int, bodies: list[bytes], max_s: float) -> dict:
    """POST /v1/layouts `bodies` from `clients` threads (one connection each)."""
    latencies: list[float] = []
    codes: dict[int, int] = {}
    stop_at = time.monotonic() + max_s

    def client(ids: list[int]) -> None:
        conn = http.client.HTTPConnection(HOST, port, timeout=120)
        try:
            for i in ids:
                if time.monotonic() > stop_at:
                    return
                t0 = time.perf_counter()
                try:
                    code = _post(conn, "/v1/layouts", bodies[i])
                except (OSError, http.client.HTTPException):
                    conn.close()
                    code = 0  # connection failed or timed out
                latencies.append(time.perf_counter() - t0)
                codes[code] = codes.get(code, 0) + 1
        finally:
            conn.close()

    with HealthProbe(port, every_s=0.05) as probe:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(client, [list(range(c, len(bodies), clients)) for c in range(clients)]))
        wall = time.perf_counter() - t0
    return {"clients": clients, "requests": len(latencies), "wall_s": round(wall, 2),
            "status": {str(k): v for k, v in sorted(codes.items())},
            "ok_throughput_req_s": round(codes.get(200, 0) / wall, 3),
            "latency_s": {"p50": _pct(latencies, 0.5), "p90": _pct(latencies, 0.9),
                          "p95": _pct(latencies, 0.95), "p99": _pct(latencies, 0.99),
                          "mean": round(statistics.fmean(latencies), 4) if latencies else 0},
            "healthz": probe.summary()}


def fat_tree(i: int, nodes: int, rng: random.Random) -> dict:
    """A fat-tree cluster of `nodes` x 8 H100 with random link figures (a new graph)."""
    return {"name": f"ft-{i}", "nodes": nodes, "gpus_per_node": 8, "gpu": "h100-sxm-80gb",
            "intra_node": {"bandwidth_gb_s": rng.uniform(100, 450), "latency_us": 3},
            "inter_node": {"bandwidth_gb_s": rng.uniform(10, 50), "latency_us": 10},
            "topology": {"kind": "fat_tree", "nodes_per_leaf": rng.choice([4, 8, 16]),
                         "nics_per_node": rng.choice([1, 2, 4, 8]),
                         "nic_gb_s": rng.uniform(10, 50), "spines": rng.randint(1, 16)}}


def fuzz_bodies(n: int, seed: int = 0) -> list[dict]:
    """`n` requests with distinct random fat-tree / NVLink-domain clusters (new graphs)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        nodes = rng.choice([16, 32, 64, 128, 256])
        cluster = fat_tree(i, nodes, rng)
        if rng.random() < 0.5:
            cluster["topology"] = {"kind": "nvlink_domain",
                                   "nodes_per_domain": rng.choice([1, 2, 4])}
        out.append({**SEED, "cluster": cluster})
    return out


def expensive_bodies(n: int, salt: int) -> list[bytes]:
    """`n` requests for distinct 256-node (2,048-GPU) fat trees: each builds its own graph
    (about 2.5 s of one core on the development machine)."""
    rng = random.Random(salt)
    return [json.dumps({**SEED, "cluster": fat_tree(1000 * salt + i, 256, rng)}).encode()
            for i in range(n)]


def under_expensive(server: Server, n: int, salt: int, max_s: float) -> dict:
    """/healthz while `n` expensive requests run at once (all sent together)."""
    with HealthProbe(server.port) as probe:
        out = phase(server.port, n, expensive_bodies(n, salt), max_s)
    return {"expensive_requests": n, "status": out["status"], "wall_s": out["wall_s"],
            "healthz": probe.summary()}


@contextmanager
def old_checkout(ref: str):
    """A detached git worktree of `ref` in a temporary folder (removed afterwards)."""
    folder = Path(tempfile.mkdtemp(prefix="trainplan-old-"))
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet",
                    str(folder / "tree"), ref], check=True)
    try:
        yield folder / "tree"
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                        str(folder / "tree")], check=False)
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def _servers(stack: ExitStack, args) -> dict[str, Server]:
    env = {"TRAINPLAN_MAX_CONCURRENT_SOLVES": str(args.workers), "TRAINPLAN_QUEUE_WAIT_S": "120",
           "TRAINPLAN_MAX_TIME_LIMIT_S": "60"}
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
    servers = {"new": Server(REPO, {**env, "TRAINPLAN_DATABASE_URL": f"sqlite:///{tmp}/new.db"})}
    stack.callback(servers["new"].stop)
    if not args.no_old:
        old = stack.enter_context(old_checkout(args.old_ref))
        servers["old"] = Server(old, {**env, "TRAINPLAN_DATABASE_URL": f"sqlite:///{tmp}/old.db"})
        stack.callback(servers["old"].stop)
    for server in servers.values():
        server.wait_ready()
        phase(server.port, 2, [json.dumps(SEED).encode()] * 4, args.max_phase_s)  # warm-up
    return servers


def _rounds(servers: dict[str, Server], args) -> list[dict]:
    names = list(servers)
    rounds = []
    workloads = Workloads()
    for r, (workload, clients) in enumerate(
            (w, c) for _ in range(args.rounds) for w in args.workload for c in args.clients):
        order = names if r % 2 == 0 else names[::-1]
        row = {"round": r, "workload": workload, "clients": clients, "order": order,
               "load_average_start": os.getloadavg()}
        bodies = workloads.bodies(workload, args.requests)  # the same for both servers
        for name in order:
            cpu_s = servers[name].cpu_s()
            row[name] = phase(servers[name].port, clients, bodies, args.max_phase_s)
            row[name]["server_cpu_s_per_request"] = round(
                (servers[name].cpu_s() - cpu_s) / max(1, row[name]["requests"]), 4)
        row["load_average_end"] = os.getloadavg()
        if "old" in row and row["old"]["ok_throughput_req_s"] > 0:
            row["ratio_new_old"] = round(row["new"]["ok_throughput_req_s"]
                                         / row["old"]["ok_throughput_req_s"], 3)
        rounds.append(row)
        print(_round_line(row, names), file=sys.stderr, flush=True)
    return rounds


def _round_line(row: dict, names: list[str]) -> str:
    """One round as a line: req/s and latency p50/p95/p99 per server, ratio, load average."""
    parts = [f"round {row['round']} {row['workload']} {row['clients']} clients"]
    for name in names:
        m, lat = row[name], row[name]["latency_s"]
        parts.append(f"{name} {m['ok_throughput_req_s']:.2f} req/s p50/p95/p99 "
                     f"{lat['p50']:.2f}/{lat['p95']:.2f}/{lat['p99']:.2f} s "
                     f"cpu {m['server_cpu_s_per_request']:.3f} s/req {m['status']}")
    if "ratio_new_old" in row:
        parts.append(f"new/old {row['ratio_new_old']:.2f}x")
    parts.append(f"load {row['load_average_start'][0]:.1f}->{row['load_average_end'][0]:.1f}")
    return " | ".join(parts)


def _median(rows: list[dict], name: str, *path: str) -> float:
    """Median over `rows` of row[name][path...]."""
    values = []
    for row in rows:
        value = row[name]
        for key in path:
            value = value[key]
        values.append(value)
    return statistics.median(values)


def _summary(rounds: list[dict], names: list[str]) -> dict:
    """Per workload and client count: each server's medians over the rounds, and the
    new/old throughput ratios with their median."""
    out: dict = {}
    for workload, clients in sorted({(r["workload"], r["clients"]) for r in rounds}):
        rows = [r for r in rounds if (r["workload"], r["clients"]) == (workload, clients)]
        entry: dict = {name: {
            "ok_throughput_req_s_median": _median(rows, name, "ok_throughput_req_s"),
            "latency_p50_s_median": _median(rows, name, "latency_s", "p50"),
            "latency_p95_s_median": _median(rows, name, "latency_s", "p95"),
            "latency_p99_s_median": _median(rows, name, "latency_s", "p99"),
            "healthz_p99_s_median": _median(rows, name, "healthz", "p99_s"),
            "server_cpu_s_per_request_median": _median(rows, name, "server_cpu_s_per_request")}
            for name in names}
        ratios = [r["ratio_new_old"] for r in rows if "ratio_new_old" in r]
        if ratios:
            entry["ratio_new_old"] = ratios
            entry["ratio_new_old_median"] = statistics.median(ratios)
        out[f"{workload}, {clients} clients"] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[8])
    parser.add_argument("--requests", type=int, default=48, help="requests per phase")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved old/new rounds")
    parser.add_argument("--workload", nargs="+", choices=("seed", "distinct"),
                        default=["seed", "distinct"],
                        help="seed: one problem repeated; distinct: planner problems (load_problems)")
    parser.add_argument("--fuzz", type=int, default=0, help="distinct random clusters first (new)")
    parser.add_argument("--expensive", type=int, default=8,
                        help="expensive requests at once for the /healthz phase (0: skip)")
    parser.add_argument("--max-phase-s", type=float, default=120.0)
    parser.add_argument("--workers", type=int, default=2, help="TRAINPLAN_MAX_CONCURRENT_SOLVES")
    parser.add_argument("--old-ref", default=OLD_REF, help="git revision served as 'old'")
    parser.add_argument("--no-old", action="store_true", help="measure this checkout only")
    args = parser.parse_args(argv)
    out: dict = {"benchmark": "POST /v1/layouts (seed problem, distinct planner problems) top_k 3 over HTTP",
                 "old_ref": None if args.no_old else args.old_ref, "workers": args.workers,
                 "cpus": os.cpu_count(), "load_average_start": os.getloadavg()}
    with ExitStack() as stack:
        servers = _servers(stack, args)
        if args.fuzz:
            fuzz = [json.dumps(b).encode() for b in fuzz_bodies(args.fuzz)]
            out["fuzz_new"] = phase(servers["new"].port, 8, fuzz, args.max_phase_s)
        out["rounds"] = _rounds(servers, args)
        out["summary"] = _summary(out["rounds"], list(servers))
        if args.expensive:  # last: the old server cannot stop a request its client left
            out["healthz_under_expensive"] = {
                name: under_expensive(server, args.expensive, 1, args.max_phase_s)
                for name, server in servers.items()}
        out["peak_tree_rss_bytes"] = {name: s.peak_rss_bytes for name, s in servers.items()}
    out["load_average_end"] = os.getloadavg()
    for key, entry in out["summary"].items():
        if "ratio_new_old_median" in entry:
            print(f"{key}: median new/old {entry['ratio_new_old_median']:.2f}x over "
                  f"{entry['ratio_new_old']}", file=sys.stderr)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
