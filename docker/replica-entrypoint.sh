#!/usr/bin/env bash
# A shard's streaming replica (docker-compose.yml), as lab/cluster makes one
# with SHARDKIT_REPLICAS=1: on a new volume, a copy of the shard by
# pg_basebackup through a physical replication slot of its own, configured
# as a hot standby (-R: standby.signal and primary_conninfo); then the
# image's own entrypoint runs the server on that data (it initialises
# nothing when the data directory is not empty).
#
# Environment: PRIMARY_HOST (the shard's service), REPLICA_NAME (the
# replica's name in docker/shardkit.toml: its application_name and, with
# - as _, its slot), PGUSER and PGPASSWORD (a superuser of the shard).
set -euo pipefail

if [[ ! -s $PGDATA/PG_VERSION ]]; then
  mkdir -p "$PGDATA"
  chown postgres: "$PGDATA"
  chmod 700 "$PGDATA"
  until pg_isready -q -h "$PRIMARY_HOST" -U "$PGUSER"; do
    echo "waiting for $PRIMARY_HOST ..."
    sleep 1
  done
  # A slot left by an earlier volume of this replica.
  PGPASSWORD=$PGPASSWORD psql -X -q -h "$PRIMARY_HOST" -U "$PGUSER" -d postgres -c \
    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots
     WHERE slot_name = '${REPLICA_NAME//-/_}' AND NOT active" >/dev/null
  gosu postgres env PGPASSWORD="$PGPASSWORD" pg_basebackup \
    -d "host=$PRIMARY_HOST user=$PGUSER application_name=$REPLICA_NAME" -D "$PGDATA" \
    --wal-method=stream --checkpoint=fast --write-recovery-conf \
    --create-slot --slot="${REPLICA_NAME//-/_}"
fi
exec docker-entrypoint.sh "$@"
