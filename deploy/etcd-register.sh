#!/bin/sh
# Registers one engine with Narwhal's etcd source and keeps it registered, across etcd outages,
# until stopped (SIGTERM or SIGINT), when it removes the registration at once.
#
#   ETCD_ENDPOINT=http://etcd:2379 TTL=10 deploy/etcd-register.sh /narwhal/engines/d3 \
#     '{"url": "http://10.0.0.13:8000", "role": "decode", "max_inflight": 256}'
#
# The key lives under a lease of TTL seconds (at least 3), renewed every TTL/3 seconds. When a
# renewal fails — etcd unreachable, or the lease gone because an outage outlasted it — the
# script grants a new lease and writes the key again, retrying every second until etcd answers:
# an outage costs the engine the time etcd was away, never its registration. (A registrant that
# exits when its keep-alive is lost, as `etcdctl lease keep-alive` does, leaves the key to lapse
# with its lease once etcd is back, and the engine out of the fleet for good.) It needs sh,
# curl and base64 only, and speaks etcd's JSON gateway (/v3/, etcd 3.4 and newer).
set -u
[ $# -eq 2 ] || { echo "usage: $0 KEY VALUE" >&2; exit 2; }
key=$1 value=$2
etcd=${ETCD_ENDPOINT:-http://127.0.0.1:2379}
ttl=${TTL:-10}
[ "$ttl" -ge 3 ] 2>/dev/null || { echo "TTL must be a whole number of seconds, at least 3" >&2; exit 2; }
every=$((ttl / 3))
lease=

b64() { printf %s "$1" | base64 | tr -d '\n'; }
call() { curl -fsS -m 5 -X POST "$etcd/v3/$1" -d "$2"; }
# nap sleeps in the background so that a signal is handled at once.
nap() { sleep "$1" & wait $!; }

stop() {
	[ -n "$lease" ] && call lease/revoke "{\"ID\":\"$lease\"}" >/dev/null 2>&1 && echo "revoked lease $lease: $key removed"
	exit 0
}
trap stop TERM INT

while :; do
	lease=$(call lease/grant "{\"TTL\":$ttl}" 2>/dev/null | sed -n 's/.*"ID":"\([0-9]*\)".*/\1/p')
	if [ -n "$lease" ] && call kv/put "{\"key\":\"$(b64 "$key")\",\"value\":\"$(b64 "$value")\",\"lease\":\"$lease\"}" >/dev/null 2>&1; then
		echo "registered $key under lease $lease (ttl ${ttl}s)"
		while nap "$every"; do
			out=$(call lease/keepalive "{\"ID\":\"$lease\"}" 2>&1) || { echo "renewal failed ($out); registering again"; break; }
			case $out in
			*'"TTL":"'[1-9]*) ;;
			*) echo "lease $lease is gone; registering again"; break ;;
			esac
		done
	fi
	nap 1
done
