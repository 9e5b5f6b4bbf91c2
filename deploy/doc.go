// Package deploy holds Narwhal's deployment files — a hardened systemd unit
// (narwhal.service), the container recipes (Containerfile.prebuilt, which `make image` builds
// FROM scratch around the binary, and Containerfile, from source) and Kubernetes manifests
// (kubernetes/) — and the tests that check them with what a CI machine has: a YAML parse, the
// configuration validation `narwhal serve --check` runs, `systemd-analyze verify`, and an image
// built with podman or buildah and inspected.
package deploy
