#!/bin/sh
# First start: a cluster with one user and one database (POSTGRES_USER / POSTGRES_PASSWORD / POSTGRES_DB, as the
# official image names them), reachable from the stack's network with a password. Later starts: the same cluster.
set -eu
: "${POSTGRES_USER:=lab}" "${POSTGRES_DB:=lab}"
if [ -z "${POSTGRES_PASSWORD:-}" ]; then echo "POSTGRES_PASSWORD is not set" >&2; exit 1; fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -A scram-sha-256 -E UTF8 >/dev/null
  rm -f "$pwfile"
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "host all all ::/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  PGPASSWORD="$POSTGRES_PASSWORD" createdb -h /run/postgresql -U "$POSTGRES_USER" "$POSTGRES_DB" 2>/dev/null || true
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/run/postgresql
