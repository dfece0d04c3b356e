#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the store backend tests (impl/tests/store_backends.rs).
# Sourced by .ci/run (or by hand: `source .ci/postgres.sh`): installs Debian's postgresql when
# it is missing, starts a cluster in a temporary directory as a non-root user, listening on
# 127.0.0.1 on a free port with trust authentication, creates a database, exports
# WORKRAIL_TEST_POSTGRES (and WORKRAIL_TEST_POSTGRES_CA, the CA of the server's TLS
# certificate; WORKRAIL_TEST_POSTGRES_CLIENT_CERT and _KEY, a client certificate the same CA
# signs for the role `wr_client_cert`, which may only log in with it) and defines
# `workrail_pg_stop`, which stops the cluster and removes it.

if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    apt-get update -qq
    apt-get install -y -qq postgresql >/dev/null
fi
workrail_pg_bin="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
workrail_pg_dir="$(mktemp -d)"

# PostgreSQL refuses to run as root: run it as the package's `postgres` user, else `nobody`.
if [ "$(id -u)" -eq 0 ]; then
    if id postgres >/dev/null 2>&1; then workrail_pg_user=postgres; else workrail_pg_user=nobody; fi
    chown "$workrail_pg_user" "$workrail_pg_dir"
    workrail_pg_as() { runuser -u "$workrail_pg_user" -- "$@"; }
else
    workrail_pg_as() { "$@"; }
fi

workrail_pg_stop() {
    workrail_pg_as "$workrail_pg_bin/pg_ctl" -D "$workrail_pg_dir/data" -m immediate stop \
        >/dev/null 2>&1 || true
    rm -rf "$workrail_pg_dir" "$workrail_pg_client"
}

workrail_pg_as "$workrail_pg_bin/initdb" -D "$workrail_pg_dir/data" -U postgres -A trust \
    -E UTF8 --no-sync >/dev/null

# TLS for the sslmode tests (impl/tests/postgres_tls.rs): a throwaway CA and a server
# certificate it signs for localhost and 127.0.0.1; plain connections keep working.
workrail_pg_tls="$workrail_pg_dir/tls"
mkdir -p "$workrail_pg_tls"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=workrail test CA" \
    -keyout "$workrail_pg_tls/ca.key" -out "$workrail_pg_tls/ca.crt" >/dev/null 2>&1
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$workrail_pg_tls/server.key" -out "$workrail_pg_tls/server.csr" >/dev/null 2>&1
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$workrail_pg_tls/server.ext"
openssl x509 -req -in "$workrail_pg_tls/server.csr" -CA "$workrail_pg_tls/ca.crt" \
    -CAkey "$workrail_pg_tls/ca.key" -CAcreateserial -days 2 \
    -extfile "$workrail_pg_tls/server.ext" -out "$workrail_pg_tls/server.crt" >/dev/null 2>&1
chmod 0600 "$workrail_pg_tls/server.key"
if [ "$(id -u)" -eq 0 ]; then chown -R "$workrail_pg_user" "$workrail_pg_tls"; fi
chmod 0755 "$workrail_pg_tls"
chmod 0644 "$workrail_pg_tls/ca.crt" "$workrail_pg_tls/server.crt"
{
    echo "ssl = on"
    echo "ssl_cert_file = '$workrail_pg_tls/server.crt'"
    echo "ssl_key_file = '$workrail_pg_tls/server.key'"
    echo "ssl_ca_file = '$workrail_pg_tls/ca.crt'"
} >>"$workrail_pg_dir/data/postgresql.conf"
export WORKRAIL_TEST_POSTGRES_CA="$workrail_pg_tls/ca.crt"

# A client certificate for the role `wr_client_cert`: over TLS it must present one the CA
# signed (`cert` authentication), and a plain connection is rejected. Every other role keeps
# trust authentication. The key stays with the user running the tests (mode 0600).
workrail_pg_client="$(mktemp -d)"
openssl req -newkey rsa:2048 -nodes -subj "/CN=wr_client_cert" \
    -keyout "$workrail_pg_client/client.key" -out "$workrail_pg_client/client.csr" >/dev/null 2>&1
printf 'extendedKeyUsage=clientAuth\n' >"$workrail_pg_client/client.ext"
openssl x509 -req -in "$workrail_pg_client/client.csr" -CA "$workrail_pg_tls/ca.crt" \
    -CAkey "$workrail_pg_tls/ca.key" -CAcreateserial -days 2 \
    -extfile "$workrail_pg_client/client.ext" -out "$workrail_pg_client/client.crt" >/dev/null 2>&1
chmod 0600 "$workrail_pg_client/client.key"
export WORKRAIL_TEST_POSTGRES_CLIENT_CERT="$workrail_pg_client/client.crt"
export WORKRAIL_TEST_POSTGRES_CLIENT_KEY="$workrail_pg_client/client.key"
{
    echo "hostssl all wr_client_cert 127.0.0.1/32 cert"
    echo "host    all wr_client_cert 127.0.0.1/32 reject"
    cat "$workrail_pg_dir/data/pg_hba.conf"
} >"$workrail_pg_dir/pg_hba.conf.new"
cat "$workrail_pg_dir/pg_hba.conf.new" >"$workrail_pg_dir/data/pg_hba.conf"
rm -f "$workrail_pg_dir/pg_hba.conf.new"

# A free port: the first from 54320 that nothing answers on (pg_ctl fails on a taken one,
# then the next is tried).
workrail_pg_port=54320
while :; do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$workrail_pg_port") 2>/dev/null \
        && workrail_pg_as "$workrail_pg_bin/pg_ctl" -D "$workrail_pg_dir/data" \
            -l "$workrail_pg_dir/server.log" -w -t 60 \
            -o "-c listen_addresses=127.0.0.1 -p $workrail_pg_port -c unix_socket_directories=$workrail_pg_dir -c fsync=off -c max_connections=200" \
            start >/dev/null; then
        break
    fi
    workrail_pg_port=$((workrail_pg_port + 1))
    if [ "$workrail_pg_port" -gt 54420 ]; then
        echo "no free port for PostgreSQL; its log:" >&2
        cat "$workrail_pg_dir/server.log" >&2 || true
        exit 1
    fi
done

"$workrail_pg_bin/createdb" -h 127.0.0.1 -p "$workrail_pg_port" -U postgres workrail_test
export WORKRAIL_TEST_POSTGRES="postgres://postgres@127.0.0.1:$workrail_pg_port/workrail_test"
"$workrail_pg_bin/psql" -q -h 127.0.0.1 -p "$workrail_pg_port" -U postgres -d workrail_test \
    -c "CREATE ROLE wr_client_cert LOGIN" \
    -c "GRANT CREATE ON DATABASE workrail_test TO wr_client_cert" >/dev/null
echo "PostgreSQL $("$workrail_pg_bin/postgres" --version | awk '{print $3}') at $WORKRAIL_TEST_POSTGRES (data in $workrail_pg_dir)"
