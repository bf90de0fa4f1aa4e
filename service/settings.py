"""Service settings: read once from the environment (TRAINPLAN_*), overridable in tests.

Units: `_s` seconds, `_bytes` bytes. Every field is documented where it is declared.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from topology.errors import Problem, SpecError
from topology.spec import ClusterSpec

ENV_PREFIX = "TRAINPLAN_"
# Seconds per table row group of a plan's searches on the 2-core reference machine
# (service.admission.plan_work): above the warm CPU seconds per group of every plan of the plan
# benchmark (benchmarks/plan_latency.py at load 4-5, README "Plan latency": 70-98 us, the most
# Qwen3-30B-A3B's).
PLAN_ROW_GROUP_S = 100e-6


def default_database_url() -> str:
    """SQLite file under $XDG_DATA_HOME/trainplan (default ~/.local/share/trainplan)."""
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return f"sqlite:///{base / 'trainplan' / 'plans.db'}"


class SettingsFileError(ValueError):
    """A TRAINPLAN_*_FILE variable names a file that cannot be read."""


def _read_setting_file(var: str, path: str) -> str:
    try:
        return Path(path).read_text().rstrip("\r\n")
    except OSError as exc:
        raise SettingsFileError(f"{var}: cannot read {path} ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise SettingsFileError(f"{var}: {path} is not UTF-8 text") from None


class Settings(BaseModel):
    """What an operator may set. Environment: TRAINPLAN_<FIELD NAME IN CAPITALS>."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    database_url: str = Field(
        default_factory=default_database_url,
        description="SQLAlchemy URL of the plan store, e.g. sqlite:////data/plans.db or "
                    "postgresql+psycopg://user:pw@host/db.")
    migrate_on_start: bool = Field(
        default=True,
        description="Bring the store's schema to the newest migration at start-up (under a "
                    "lock). Set false where `trainplan db upgrade` runs as its own step "
                    "(k8s Job, compose init service).")
    plan_retention_s: float | None = Field(
        default=None, gt=0,
        description="Plans older than this many seconds read as absent and are purged; "
                    "unset keeps plans forever.")
    api_token: str | None = Field(
        default=None, description="When set, /v1 routes require 'Authorization: Bearer <token>'.")
    max_body_bytes: int = Field(
        default=1_000_000, ge=1_024, description="Largest request body accepted (413 above).")
    body_read_timeout_s: float = Field(
        default=30.0, gt=0, description="Longest time to receive a whole request body, from "
                                        "its headers (408 after it).")
    header_read_timeout_s: float = Field(
        default=10.0, gt=0, description="Longest time to receive a request's line and headers, "
                                        "from the connection's first byte or its previous "
                                        "response (408 and close after it; slowloris).")
    default_time_limit_s: float = Field(
        default=2.0, gt=0, description="Solver time limit when a /v1/layouts request does not set one (a "
                                        "plan takes `trainplan plan`'s, SearchOptions' default, so both routes "
                                        "rank alike; both capped at max_time_limit_s).")
    max_time_limit_s: float = Field(
        default=20.0, gt=0, description="Server cap on a request's solver time limit.")
    max_concurrent_solves: int = Field(
        default_factory=lambda: max(1, os.cpu_count() or 1), ge=1,
        description="Solves running at once; further requests wait up to queue_wait_s, then 503.")
    queue_wait_s: float = Field(
        default=5.0, ge=0, description="How long a request waits for a solve slot before 503.")
    max_top_k: int = Field(default=20, ge=1, description="Most layouts one request may ask for.")
    max_cluster_gpus: int = Field(
        default=200_000, ge=1,
        description="Largest cluster (nodes x gpus_per_node) a request may describe (422 above).")
    max_solver_workers: int = Field(
        default=2, ge=1, description="Cap on a request's CP-SAT workers (options.workers).")
    max_graph_elements: int = Field(
        default=1_000_000, ge=1,  # a 100,000-GPU flat or fat-tree cluster is ~830,000
        description="Admission: largest cluster graph (vertices + directed links, estimated "
                    "from the spec before building it) a request may describe (422 above).")
    max_table_rows: int = Field(
        default=10**9, ge=1,
        description="Admission: largest search space (product of the per-field layout domains) "
                    "a request may open (422 above).")
    plan_row_group_s: float = Field(
        default=PLAN_ROW_GROUP_S, gt=0,
        description="Admission: seconds one table row group of a plan costs on this server "
                    "(service.admission.plan_work; the default is measured on the 2-core reference "
                    "machine, benchmarks/plan_latency.py).")
    plan_admit_fraction: float = Field(
        default=0.75, gt=0, le=1,
        description="Admission: a plan whose estimate is above this fraction of max_time_limit_s is "
                    "refused (422 over_capacity); the rest of the deadline is the estimate's margin.")
    worker_max_rss_bytes: int = Field(
        # a warm worker on the seed: ~175 MB; the peak (VmHWM) of a worker planning the plan
        # benchmark's MoE plans on 256 rail-optimized H100 (README "Plan latency"): Qwen3-30B-A3B
        # 337 MB, Mixtral 8x7B 436 MB (both refused 503 memory_exceeded at the old 320 MB)
        default=640_000_000, ge=50_000_000,
        description="Memory budget of one solve worker (resident bytes); a worker above it is "
                    "stopped (its request answers 503) and replaced.")

    @field_validator("api_token")
    @classmethod
    def _empty_token_is_none(cls, value: str | None) -> str | None:
        """An empty token (e.g. compose's `${TRAINPLAN_API_TOKEN:-}`) means no token, not a
        token no client can send."""
        return value or None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> Settings:
        """Settings from TRAINPLAN_* variables (unset ones keep their defaults).

        `TRAINPLAN_<NAME>_FILE` names a file holding the value (trailing newline dropped);
        it wins over `TRAINPLAN_<NAME>`. Raises: pydantic.ValidationError on a malformed
        value, SettingsFileError on an unreadable file.
        """
        env = os.environ if environ is None else environ
        values: dict[str, str] = {}
        for name in cls.model_fields:
            var = ENV_PREFIX + name.upper()
            if var + "_FILE" in env:  # a secret mounted as a file (k8s Secret volume)
                values[name] = _read_setting_file(var + "_FILE", env[var + "_FILE"])
            elif var in env:
                values[name] = env[var]
        return cls.model_validate(values)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (cached; tests pass their own Settings to create_app)."""
    return Settings.from_env()


def check_cluster_size(cluster: ClusterSpec, settings: Settings) -> None:
    """Refuse clusters above `max_cluster_gpus` (placement and routing scale with GPUs); the
    one cap the HTTP routes (422) and the CLI (exit 2) apply.

    Raises: SpecError.
    """
    if cluster.gpus > settings.max_cluster_gpus:
        raise SpecError("cluster too large", [Problem(
            "cluster.nodes", f"{cluster.gpus:,} GPUs; trainplan plans at most {settings.max_cluster_gpus:,} "
                             f"(set {ENV_PREFIX}MAX_CLUSTER_GPUS to change)")])


def cli_settings() -> Settings:
    """get_settings() for the CLI: a malformed TRAINPLAN_* variable is a SpecError naming it.

    Raises: SpecError.
    """
    try:
        return get_settings()
    except ValidationError as exc:
        problems = [Problem(ENV_PREFIX + ".".join(map(str, e["loc"])).upper(), e["msg"]) for e in exc.errors()]
        raise SpecError("bad environment", problems) from None
