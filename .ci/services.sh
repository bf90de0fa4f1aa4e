# Sourced by .ci/run: installs (Debian packages) and starts PostgreSQL, installs Chromium,
# and exports TRAINPLAN_TEST_POSTGRES_URL. Runs as root (CI does); loopback only.
export DEBIAN_FRONTEND=noninteractive
if ! command -v pg_ctlcluster >/dev/null || ! [ -x /usr/bin/chromium ]; then
    apt-get update -qq
    apt-get install -y -qq postgresql chromium >/dev/null
fi
PG_VERSION="$(ls /usr/lib/postgresql | sort -n | tail -1)"
if ! pg_lsclusters -h | grep -q "^$PG_VERSION main"; then
    pg_createcluster "$PG_VERSION" main >/dev/null
fi
pg_ctlcluster "$PG_VERSION" main start 2>/dev/null || true  # already running is fine
for _ in $(seq 30); do pg_isready -q -h 127.0.0.1 && break; sleep 1; done
pg_isready -h 127.0.0.1
_psql() { su postgres -c "psql -qtAX -c \"$1\""; }
if [ "$(_psql "SELECT 1 FROM pg_roles WHERE rolname = 'trainplan_ci'")" != "1" ]; then
    _psql "CREATE ROLE trainplan_ci LOGIN CREATEDB PASSWORD 'trainplan-ci'"
fi
if [ "$(_psql "SELECT 1 FROM pg_database WHERE datname = 'trainplan_ci'")" != "1" ]; then
    _psql "CREATE DATABASE trainplan_ci OWNER trainplan_ci"
fi
export TRAINPLAN_TEST_POSTGRES_URL="postgresql+psycopg://trainplan_ci:trainplan-ci@127.0.0.1:5432/trainplan_ci"
