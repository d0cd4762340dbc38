#!/usr/bin/env bash
# Writes the even split, version 1, into the catalog's shard_directory if it
# is empty: bucket b -> shard floor(b * N / 64), the rows lab/cluster start
# writes. Run by the "directory" service of docker-compose.yml; waits (up to
# SHARDKIT_SEED_WAIT_S seconds, default 600) until the table exists, that is
# until `shardctl --config docker/shardkit.toml --sql-dir examples/bookstore-service/sql migrate` has run.
#
# Environment: SHARDKIT_SHARDS (default 2); PGHOST, PGUSER, PGPASSWORD and
# PGDATABASE (the catalog database).
set -euo pipefail

shards=${SHARDKIT_SHARDS:-2}
wait_s=${SHARDKIT_SEED_WAIT_S:-600}

deadline=$((SECONDS + wait_s))
until [[ $(psql -X -qAt -c "SELECT to_regclass('shard_directory') IS NOT NULL") == t ]]; do
  if ((SECONDS >= deadline)); then
    echo "no shard_directory in $PGDATABASE after ${wait_s}s: run build/shardctl --config docker/shardkit.toml --sql-dir examples/bookstore-service/sql migrate, then docker compose up directory" >&2
    exit 1
  fi
  echo "waiting for shardctl migrate to create shard_directory in $PGDATABASE ..."
  sleep 5
done

psql -X -q -v ON_ERROR_STOP=1 -c "
  INSERT INTO shard_directory (bucket, shard, version)
  SELECT b, b * $shards / 64, 1 FROM generate_series(0, 63) AS b
  WHERE NOT EXISTS (SELECT 1 FROM shard_directory)"
echo "catalog: shard_directory holds the even split over $shards shards (or an existing placement)"
