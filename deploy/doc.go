// Package deploy holds Narwhal's deployment files — a hardened systemd unit
// (narwhal.service), a container recipe (Containerfile) and Kubernetes manifests
// (kubernetes/) — and the tests that check them with what a CI machine has: a YAML parse, the
// configuration validation `narwhal serve --check` runs, and `systemd-analyze verify`.
package deploy
