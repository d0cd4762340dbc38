#!/usr/bin/env bash
# Lets the shards' replicas stream (docker-compose.yml): run once by the
# postgres image when a shard's volume is new. The image's pg_hba.conf
# admits every database over the network but not replication connections;
# the replicas connect as bookstore, the image's superuser.
set -euo pipefail
echo "host replication bookstore all scram-sha-256" >>"$PGDATA/pg_hba.conf"
