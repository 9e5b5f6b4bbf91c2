#!/bin/sh
# testports.sh: fails on a literal listener port in a test. A test that binds a fixed port fails
# whenever anything else holds it (`make run` holds 8000 and 8001), and two test binaries that
# bind the same one fail each other. A test listens on port 0 and reads the port it got.
#
# It flags, in every *_test.go file git knows: net.Listen/tls.Listen/ListenPacket and
# ListenAndServe with a literal host:port whose port is not 0; a listener address field or
# variable (Listen, AdminListen, Bind, Addr…) given such a literal, in Go or in YAML text.
#
# Allowlist: a line that sets such a port on purpose but never binds it (a configuration only
# parsed or validated, a port a test expects to be refused) carries a comment containing
# "testports: not bound" and the reason. A file that only parses configurations is listed below
# with its reason. Run from the repository root; `make test` runs it.
set -u

# Files that never open a listener: the configuration package's tests parse and validate text.
allowed_files='^config/'

pattern_go_listen='(net|tls)\.Listen(Packet)?\([^)]*"[^"]*:[1-9][0-9]*"'
pattern_serve='ListenAndServe(TLS)?\("[^"]*:[1-9]'
pattern_assign='(Listen|Bind|Addr)[A-Za-z]*( *, *[A-Za-z_.]+)* *= *"[^"]*:[1-9][0-9]*"'
pattern_field='(^|[^A-Za-z])(Listen|AdminListen|Bind|Addr):[[:space:]]*"[^"]*:[1-9][0-9]*"'
pattern_yaml='(^|[^A-Za-z_])(listen|admin_listen|bind):[[:space:]]*\\?"?[^",}]*:[1-9][0-9]*'

files=$(git ls-files '*_test.go' | grep -Ev "$allowed_files")
[ -n "$files" ] || exit 0
found=$(echo "$files" | xargs grep -nE -e "$pattern_go_listen" -e "$pattern_serve" -e "$pattern_assign" \
	-e "$pattern_field" -e "$pattern_yaml" | grep -v 'testports: not bound')
if [ -n "$found" ]; then
	echo "testports: a test names a fixed listener port (listen on port 0 and read the port it got;"
	echo "if the port is never bound, say so on the line: // testports: not bound (why)):"
	printf "%s\n" "$found"
	exit 1
fi
echo "testports: no test names a fixed listener port"
