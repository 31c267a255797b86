#!/bin/sh
# Writes .env next to docker-compose.yml (readable only by you) with one
# new secret per user: each NATS user's password (deploy/nats.conf), each
# Redis user's and the default user's, and the API token (the
# coordinator's and the gateway's). docker compose reads it; run this once
# before `docker compose up`. An existing .env is left alone (remove it and
# run again to rotate every secret, then `docker compose up -d` again).
set -eu
cd "$(dirname "$0")/.."
if [ -e .env ]; then
  echo "compose-secrets: .env exists; left as it is" >&2
  exit 0
fi
secret() { printf 'p%s' "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"; }
umask 077
{
  echo "# Secrets of docker-compose.yml, written by deploy/compose-secrets.sh. Keep out of version control."
  for v in NATS_PASSWORD_COORDINATOR NATS_PASSWORD_GEN_WORKER_R0 NATS_PASSWORD_GEN_WORKER_R1 \
           NATS_PASSWORD_ENV_WORKER_0 NATS_PASSWORD_PREDICTOR_GW NATS_PASSWORD_TRAINER NATS_PASSWORD_GATEWAY \
           REDIS_PASSWORD REDIS_PASSWORD_COORDINATOR REDIS_PASSWORD_GEN_WORKER REDIS_PASSWORD_ENV_WORKER \
           REDIS_PASSWORD_PREDICTOR_GW API_TOKEN; do
    echo "$v=$(secret)"
  done
} > .env
echo "compose-secrets: wrote .env (one secret per user; the CLI's are NATS_PASSWORD_TRAINER and API_TOKEN)" >&2
