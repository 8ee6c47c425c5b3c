#!/usr/bin/env bash
# Make sure the local services the tests talk to are up.
#
# Usage: scripts/services.sh [postgres|mariadb|redis|rabbitmq|mosquitto|nats|all]...
#        (default: postgres)
#
# For each named service: if it already answers, say so. Otherwise install
# its Debian package when the server binary is missing (only when running as
# root; otherwise print the command to run), start it, and wait up to
# SERVICES_WAIT_SECONDS (default 60) for it to answer. One line is printed per
# service. Exits non-zero with a message naming the service that could not be
# brought up. Safe to run any number of times.
#
# PostgreSQL is also checked for what the tests expect: the `postgres`
# superuser connecting over TCP to 127.0.0.1:5432 without a password (trust),
# and wal_level=logical with room for replication slots (set, and the server
# restarted once, when missing).
set -euo pipefail

readonly ALL_SERVICES=(postgres mariadb redis rabbitmq mosquitto nats)
readonly WAIT_SECONDS="${SERVICES_WAIT_SECONDS:-60}"

apt_updated=0
failed=0

usage() {
	sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"
}

log() { printf '%s\n' "$*"; }
err() { printf '%s\n' "$*" >&2; }

# indent TEXT: print the last lines of a command's output, marked as quoted.
indent() { printf '%s\n' "$1" | tail -n 20 | sed 's/^/  | /'; }

is_root() { [[ "$(id -u)" -eq 0 ]]; }

# tcp_open HOST PORT: succeeds when something accepts a TCP connection.
tcp_open() {
	# shellcheck disable=SC2016 # $1 and $2 are expanded by the inner shell.
	timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# --- per-service knowledge -------------------------------------------------

# package_of SERVICE: the Debian package that provides the server.
package_of() {
	case "$1" in
	postgres) echo postgresql ;;
	mariadb) echo mariadb-server ;;
	redis) echo redis-server ;;
	rabbitmq) echo rabbitmq-server ;;
	mosquitto) echo mosquitto ;;
	nats) echo nats-server ;;
	*) return 1 ;;
	esac
}

# endpoint_of SERVICE: where the service is expected to answer.
endpoint_of() {
	case "$1" in
	postgres) echo 127.0.0.1:5432 ;;
	mariadb) echo 127.0.0.1:3306 ;;
	redis) echo 127.0.0.1:6379 ;;
	rabbitmq) echo 127.0.0.1:5672 ;;
	mosquitto) echo 127.0.0.1:1883 ;;
	nats) echo 127.0.0.1:4222 ;;
	*) return 1 ;;
	esac
}

# installed SERVICE: succeeds when the server (and the client used to probe
# it) are present.
installed() {
	case "$1" in
	postgres)
		command -v pg_ctlcluster >/dev/null && command -v pg_isready >/dev/null &&
			command -v psql >/dev/null && compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
		;;
	mariadb) [[ -x /usr/sbin/mariadbd ]] ;;
	redis) command -v redis-server >/dev/null ;;
	rabbitmq) [[ -x /usr/sbin/rabbitmq-server ]] ;;
	mosquitto) [[ -x /usr/sbin/mosquitto ]] ;;
	nats) [[ -x /usr/sbin/nats-server ]] ;;
	*) return 1 ;;
	esac
}

# answers SERVICE: succeeds when the service responds.
answers() {
	case "$1" in
	postgres) pg_isready -q -h 127.0.0.1 -p 5432 -t 2 ;;
	mariadb)
		# The ping goes over the local socket, where it answers whoever asks
		# (over TCP a server may refuse the host before it says anything).
		if command -v mariadb-admin >/dev/null; then
			mariadb-admin --connect-timeout=2 ping >/dev/null 2>&1 || return 1
		fi
		tcp_open 127.0.0.1 3306
		;;
	redis)
		if command -v redis-cli >/dev/null; then
			[[ "$(timeout 3 redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null)" == PONG ]]
		else
			tcp_open 127.0.0.1 6379
		fi
		;;
	rabbitmq) tcp_open 127.0.0.1 5672 ;;
	mosquitto) tcp_open 127.0.0.1 1883 ;;
	nats) tcp_open 127.0.0.1 4222 ;;
	*) return 1 ;;
	esac
}

# pg_version: the newest configured PostgreSQL version, e.g. "15".
pg_version() {
	local v
	v="$(find /etc/postgresql -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | sort -V | tail -n 1)"
	[[ -n "$v" ]] || return 1
	echo "$v"
}

# start_cmd SERVICE: prints the command that starts the service, one
# argument per line, so it can be run directly or shown to the user.
start_cmd() {
	case "$1" in
	postgres)
		printf '%s\n' pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main start
		;;
	mariadb)
		printf '%s\n' start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
		;;
	redis)
		printf '%s\n' redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 \
			--save '' --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
		;;
	rabbitmq) printf '%s\n' rabbitmq-server -detached ;;
	mosquitto) printf '%s\n' mosquitto -d -c /etc/mosquitto/mosquitto.conf ;;
	nats)
		printf '%s\n' start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
			-a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
		;;
	*) return 1 ;;
	esac
}

# make_dir DIR OWNER MODE: create a runtime directory if it is missing; an
# existing one is left as it is.
make_dir() {
	[[ -d "$1" ]] || install -d -o "$2" -m "$3" "$1"
}

# prepare SERVICE: runtime directories that do not survive a reboot.
prepare() {
	case "$1" in
	postgres) make_dir /var/run/postgresql postgres 2775 ;;
	mariadb) make_dir /run/mysqld mysql 755 ;;
	redis)
		make_dir /var/lib/redis root 755
		make_dir /var/log/redis root 755
		;;
	mosquitto)
		make_dir /run/mosquitto mosquitto 755
		make_dir /var/log/mosquitto mosquitto 755
		;;
	nats) make_dir /var/lib/nats-server root 750 ;;
	*) ;; # nothing to prepare
	esac
}

# --- generic steps ---------------------------------------------------------

# install_package PACKAGE: apt-get install, as root, showing errors only.
install_package() {
	local pkg="$1" out
	export DEBIAN_FRONTEND=noninteractive
	if ((apt_updated == 0)); then
		if ! out="$(apt-get update -qq </dev/null 2>&1)"; then
			err "  apt-get update failed:"
			indent "$out" >&2
			return 1
		fi
		apt_updated=1
	fi
	if ! out="$(apt-get install -y -qq "$pkg" </dev/null 2>&1)"; then
		err "  apt-get install -y $pkg failed:"
		indent "$out" >&2
		return 1
	fi
}

# wait_until_up SERVICE: poll until the service answers or time runs out.
wait_until_up() {
	local svc="$1" deadline=$((SECONDS + WAIT_SECONDS))
	until answers "$svc"; do
		((SECONDS < deadline)) || return 1
		sleep 1
	done
}

# check_pg_trust: the tests connect as postgres over TCP with no password.
check_pg_trust() {
	local out hba=(/etc/postgresql/*/main/pg_hba.conf)
	if out="$(PGCONNECT_TIMEOUT=5 psql -w -X -q -At -c 'select 1' \
		'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' 2>&1 </dev/null)"; then
		return 0
	fi
	err "postgres: FAILED: server is up, but user postgres cannot connect to 127.0.0.1:5432 without a password:"
	indent "$out" >&2
	err "  the tests expect trust authentication for local TCP connections; add this line near the top of"
	err "  ${hba[0]} and reload PostgreSQL (pg_ctlcluster --skip-systemctl-redirect VERSION main reload):"
	err "    host all all 127.0.0.1/32 trust"
	return 1
}

# pg_setting NAME: the running server's value of a setting.
pg_setting() {
	PGCONNECT_TIMEOUT=5 psql -w -X -q -At -c "SHOW $1" \
		'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' </dev/null
}

# ensure_pg_logical: capture from the write-ahead log (sources[].capture:
# wal) needs wal_level=logical, and the tests create replication slots side
# by side. Sets what is missing with ALTER SYSTEM and restarts PostgreSQL
# once, which those settings need.
ensure_pg_logical() {
	local level slots senders
	level="$(pg_setting wal_level)" || return 1
	slots="$(pg_setting max_replication_slots)" || return 1
	senders="$(pg_setting max_wal_senders)" || return 1
	if [[ "$level" == logical ]] && ((slots >= 64 && senders >= 64)); then
		return 0
	fi
	if ! is_root; then
		err "postgres: FAILED: wal_level is $level (max_replication_slots $slots, max_wal_senders $senders); as root run:"
		err "  psql -U postgres -h 127.0.0.1 -c \"ALTER SYSTEM SET wal_level = logical\" -c \"ALTER SYSTEM SET max_replication_slots = 64\" -c \"ALTER SYSTEM SET max_wal_senders = 64\""
		err "  pg_ctlcluster --skip-systemctl-redirect $(pg_version) main restart"
		return 1
	fi
	PGCONNECT_TIMEOUT=5 psql -w -X -q -At -c "ALTER SYSTEM SET wal_level = logical" \
		-c "ALTER SYSTEM SET max_replication_slots = 64" -c "ALTER SYSTEM SET max_wal_senders = 64" \
		'postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' </dev/null >/dev/null || return 1
	pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main restart </dev/null >/dev/null 2>&1 || true
	if ! wait_until_up postgres; then
		err "postgres: FAILED: not answering ${WAIT_SECONDS}s after a restart for wal_level=logical"
		return 1
	fi
	log "postgres: wal_level set to logical (was $level), restarted once"
}

# ensure SERVICE: bring one service up, printing one status line.
ensure() {
	local svc="$1" ep started=0 start_log
	ep="$(endpoint_of "$svc")"

	if ! answers "$svc"; then
		if ! installed "$svc"; then
			local pkg
			pkg="$(package_of "$svc")"
			if ! is_root; then
				err "$svc: FAILED: not installed; as root run: apt-get update && apt-get install -y $pkg"
				return 1
			fi
			log "$svc: not installed, installing package $pkg"
			if ! install_package "$pkg" || ! installed "$svc"; then
				err "$svc: FAILED: could not install the server (package $pkg)"
				return 1
			fi
		fi
		# Installing may already have started it.
		if ! answers "$svc"; then
			if [[ "$svc" == postgres ]] && ! pg_version >/dev/null; then
				local v
				v="$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -V | tail -n 1)"
				err "$svc: FAILED: no cluster in /etc/postgresql; as root create one with: pg_createcluster ${v:-VERSION} main"
				return 1
			fi
			local -a cmd
			mapfile -t cmd < <(start_cmd "$svc")
			if ! is_root; then
				err "$svc: FAILED: not answering on $ep; as root run: ${cmd[*]}"
				return 1
			fi
			prepare "$svc"
			start_log="$(mktemp)"
			# A failing start command is not fatal on its own (for example
			# "already running" while still booting); the wait decides.
			"${cmd[@]}" </dev/null >"$start_log" 2>&1 || true
			if ! wait_until_up "$svc"; then
				err "$svc: FAILED: not answering on $ep ${WAIT_SECONDS}s after: ${cmd[*]}"
				indent "$(<"$start_log")" >&2
				rm -f "$start_log"
				return 1
			fi
			rm -f "$start_log"
			started=1
		fi
	fi

	if [[ "$svc" == postgres ]]; then
		check_pg_trust || return 1
		ensure_pg_logical || return 1
	fi

	if ((started)); then
		log "$svc: started, answering on $ep"
	else
		log "$svc: up, answering on $ep"
	fi
}

main() {
	local -a wanted=()
	local arg s
	for arg in "$@"; do
		case "$arg" in
		-h | --help)
			usage
			return 0
			;;
		all) wanted+=("${ALL_SERVICES[@]}") ;;
		postgres | mariadb | redis | rabbitmq | mosquitto | nats) wanted+=("$arg") ;;
		*)
			err "unknown service: $arg (expected one of: ${ALL_SERVICES[*]} all)"
			return 2
			;;
		esac
	done
	((${#wanted[@]})) || wanted=(postgres)

	local -A seen=()
	for s in "${wanted[@]}"; do
		[[ -n "${seen[$s]:-}" ]] && continue
		seen[$s]=1
		ensure "$s" || failed=1
	done

	if ((failed)); then
		err "some services could not be brought up (see above)"
		return 1
	fi
}

main "$@"
