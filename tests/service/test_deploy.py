"""deploy/ agrees with the app: probe paths exist, the image runs non-root with a healthcheck,
compose wires PostgreSQL, the settings named in manifests exist. (No YAML library is a
dependency, so the manifests are checked as text, line by line.)"""
from __future__ import annotations

import re
from pathlib import Path

from service.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _routes(client) -> set[str]:
    return set(client.get("/openapi.json").json()["paths"])


def test_dockerfile_slim_nonroot_healthcheck():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\s*$", text, re.M)
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and user[-1] not in ("root", "0")
    assert re.search(r"^HEALTHCHECK .*", text, re.M) and "/healthz" in text
    assert 'CMD ["trainplan", "serve", "--host", "0.0.0.0"' in text


def test_compose_uses_postgres():
    text = (DEPLOY / "docker-compose.yml").read_text()
    assert re.search(r"image: postgres:\d+", text)
    assert "TRAINPLAN_DATABASE_URL: postgresql+psycopg://" in text
    assert "condition: service_healthy" in text


def test_compose_no_default_password_loopback_api_and_migration_step():
    text = (DEPLOY / "docker-compose.yml").read_text()
    assert ":-" not in text.replace("${TRAINPLAN_API_TOKEN:-}", "")  # no defaulted secrets
    assert "${POSTGRES_PASSWORD:?" in text
    ports = re.findall(r'^\s+- "([^"]+)"', text, re.M)
    assert ports and all(p.startswith("127.0.0.1:") for p in ports)
    assert 'command: ["trainplan", "db", "upgrade"]' in text
    assert "condition: service_completed_successfully" in text
    assert 'TRAINPLAN_MIGRATE_ON_START: "false"' in text


def test_k8s_migration_job_runs_db_upgrade():
    job = (DEPLOY / "k8s" / "migrate-job.yaml").read_text()
    assert "kind: Job" in job and 'args: ["trainplan", "db", "upgrade"]' in job
    config = (DEPLOY / "k8s" / "configmap.yaml").read_text()
    assert 'TRAINPLAN_MIGRATE_ON_START: "false"' in config


def test_k8s_probes_hit_real_routes(client):
    dep = (DEPLOY / "k8s" / "deployment.yaml").read_text()
    paths = re.findall(r"path: (\S+)", dep)
    assert set(paths) == {"/healthz", "/readyz"} and set(paths) <= _routes(client)
    for probe in ("livenessProbe", "readinessProbe", "startupProbe", "resources", "runAsNonRoot"):
        assert probe + ":" in dep
    assert "kind: Deployment" in dep


def test_k8s_kinds_and_settings_names():
    texts = {p.name: p.read_text() for p in (DEPLOY / "k8s").glob("*.yaml")}
    kinds = {re.search(r"^kind: (\w+)", t, re.M).group(1) for t in texts.values()}
    assert kinds == {"ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler", "Job",
                     "NetworkPolicy"}
    names = set(re.findall(r"\b(TRAINPLAN_[A-Z_]+)", "".join(texts.values())))
    known = {"TRAINPLAN_" + f.upper() + end for f in Settings.model_fields for end in ("", "_FILE")}
    assert names and names <= known, names - known
    config = dict(re.findall(r"^  (TRAINPLAN_[A-Z_]+): \"([^\"]*)\"", texts["configmap.yaml"], re.M))
    Settings.from_env({**config, "TRAINPLAN_DATABASE_URL": "sqlite://"})  # values parse


def test_compose_default_empty_token_leaves_routes_open(make_client):
    """docker-compose.yml passes TRAINPLAN_API_TOKEN as `${TRAINPLAN_API_TOKEN:-}`: unset, the
    variable is the empty string, which must mean "no token" (else every /v1 call is a 401)."""
    assert "TRAINPLAN_API_TOKEN: ${TRAINPLAN_API_TOKEN:-}" in (DEPLOY / "docker-compose.yml").read_text()
    assert Settings.from_env({"TRAINPLAN_API_TOKEN": ""}).api_token is None
    assert make_client(api_token="").get("/v1/presets").status_code == 200


def test_k8s_hardening():
    """Replicas left to the HPA, seccomp RuntimeDefault, secrets as mounted files (no secret
    in an environment value), a NetworkPolicy for the pods."""
    dep = (DEPLOY / "k8s" / "deployment.yaml").read_text()
    assert not re.search(r"^\s*replicas:", dep, re.M)
    assert "seccompProfile:\n          type: RuntimeDefault" in dep
    assert "secretKeyRef" not in dep and "TRAINPLAN_DATABASE_URL_FILE" in dep
    assert "secretName: trainplan-db" in dep and "secretName: trainplan-api" in dep
    job = (DEPLOY / "k8s" / "migrate-job.yaml").read_text()
    assert "secretKeyRef" not in job and "RuntimeDefault" in job
    policy = (DEPLOY / "k8s" / "networkpolicy.yaml").read_text()
    assert "kind: NetworkPolicy" in policy and "port: 8000" in policy and "port: 5432" in policy


def test_settings_from_mounted_files(tmp_path):
    from service.settings import SettingsFileError

    (tmp_path / "url").write_text("sqlite:////data/p.db\n")
    s = Settings.from_env({"TRAINPLAN_DATABASE_URL_FILE": str(tmp_path / "url"),
                           "TRAINPLAN_DATABASE_URL": "sqlite:////ignored.db"})
    assert s.database_url == "sqlite:////data/p.db"  # the file wins; its newline dropped
    import pytest

    with pytest.raises(SettingsFileError, match="TRAINPLAN_API_TOKEN_FILE: cannot read"):
        Settings.from_env({"TRAINPLAN_API_TOKEN_FILE": str(tmp_path / "missing")})
