# Start a throwaway PostgreSQL cluster on a free loopback port, owned by the postgres user; export its URL.
pgbin=$(ls -d /usr/lib/postgresql/*/bin | tail -1)
pgdata=$(mktemp -d /tmp/knob-sweeper-pg.XXXXXX)
pgport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
chown postgres "$pgdata"
su postgres -c "$pgbin/initdb -D $pgdata -A trust -U postgres" >/dev/null
su postgres -c "$pgbin/pg_ctl -D $pgdata -o '-p $pgport -k /tmp -c listen_addresses=127.0.0.1' -l $pgdata/log -w start" >/dev/null
su postgres -c "$pgbin/createdb -h 127.0.0.1 -p $pgport -U postgres knob_sweeper"
export KNOB_SWEEPER_PG_URL="postgresql+psycopg://postgres@127.0.0.1:$pgport/knob_sweeper"
# stopped and removed when the CI script exits, whatever its status (which the trap leaves as it is)
trap 'su postgres -c "$pgbin/pg_ctl -D $pgdata -m fast stop" >/dev/null 2>&1 || true; rm -rf "$pgdata"' EXIT
