#!/bin/sh
# ctest's *.OnPostgres entries: one integration suite again, every daemon of it on a PostgreSQL
# database of its own (GPUCLOUD_TEST_STORE=postgres; support/test_daemon.h). Without the tests'
# PostgreSQL (scripts/start-postgres.sh) it skips (exit 77), or fails when GPUCLOUD_REQUIRE
# names postgres.
#   run_on_postgres.sh INTEGRATION_TESTS_BINARY SUITE
set -eu
binary=$1
suite=$2
if [ -z "${GPUCLOUD_TEST_POSTGRES_URL:-}" ] && [ ! -r /var/run/gpucloud/postgres.env ]; then
  case ",${GPUCLOUD_REQUIRE:-}," in
    *,postgres,*|*,all,*) echo "run_on_postgres: required capability 'postgres' is missing (scripts/start-postgres.sh)" >&2; exit 1 ;;
  esac
  echo "run_on_postgres: skipped: needs the tests' PostgreSQL (scripts/start-postgres.sh)"
  exit 77
fi
GPUCLOUD_TEST_STORE=postgres exec "$binary" --gtest_filter="$suite.*"
