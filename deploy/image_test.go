package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// buildDir holds what staticBinary built; TestMain removes it.
var buildDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// staticBinary is the binary `make image` packages, built once per test binary the way it
// builds it: the Makefile's build target with CGO_ENABLED=0.
var staticBinary = func() func(t *testing.T) string {
	var once sync.Once
	var bin string
	var err error
	return func(t *testing.T) string {
		t.Helper()
		once.Do(func() {
			if _, lookErr := exec.LookPath("make"); lookErr != nil {
				err = fmt.Errorf("make is not installed: %w", lookErr)
				return
			}
			buildDir, err = os.MkdirTemp("", "narwhal-deploy-")
			if err != nil {
				return
			}
			bin = filepath.Join(buildDir, "narwhal")
			cmd := exec.Command("make", "--no-print-directory", "-C", "..", "build", "BIN="+bin)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, buildErr := cmd.CombinedOutput(); buildErr != nil {
				err = fmt.Errorf("make build: %v\n%s", buildErr, out)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return bin
	}
}()

// imageTools are the container tools installed here, podman first (the Makefile's choice).
func imageTools(t *testing.T) []string {
	var tools []string
	for _, name := range []string{"podman", "buildah"} {
		if p, err := exec.LookPath(name); err == nil {
			tools = append(tools, p)
		}
	}
	if len(tools) == 0 {
		t.Skip("podman or buildah is not installed (Debian: apt-get install podman buildah; .ci/run does it): the image is not built")
	}
	return tools
}

// privateStorage is an environment whose podman and buildah keep their images in a fresh
// directory with the vfs driver: nothing is shared with the machine's own images or with another
// test run, and vfs works wherever overlay mounts are refused (inside a container, rootless).
func privateStorage(t *testing.T) []string {
	dir := t.TempDir()
	conf := filepath.Join(dir, "storage.conf")
	text := fmt.Sprintf("[storage]\ndriver = \"vfs\"\nrunroot = %q\ngraphroot = %q\n", filepath.Join(dir, "run"), filepath.Join(dir, "graph"))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "CONTAINERS_STORAGE_CONF="+conf, "TMPDIR="+dir)
}

// run runs a command in env and returns its standard output, failing the test with its output.
func run(t *testing.T, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s%s", filepath.Base(name), strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// imageConfig is the OCI image configuration the tests read.
type imageConfig struct {
	User         string
	ExposedPorts map[string]struct{}
	Entrypoint   []string
	Cmd          []string
	Labels       map[string]string
}

// inspect reads an image's configuration with `podman image inspect` (or buildah's inspect
// where only buildah is installed).
func inspect(t *testing.T, env []string, tool, image string) (id string, cfg imageConfig) {
	t.Helper()
	if filepath.Base(tool) == "podman" {
		out := run(t, env, tool, "image", "inspect", image)
		var images []struct {
			ID     string `json:"Id"`
			Config imageConfig
		}
		if err := json.Unmarshal(out, &images); err != nil || len(images) != 1 {
			t.Fatalf("podman image inspect %s: %v: %s", image, err, out)
		}
		return images[0].ID, images[0].Config
	}
	out := run(t, env, tool, "inspect", "--type", "image", image)
	var img struct {
		FromImageID string
		OCIv1       struct{ Config imageConfig }
	}
	if err := json.Unmarshal(out, &img); err != nil {
		t.Fatalf("buildah inspect %s: %v: %s", image, err, out)
	}
	return img.FromImageID, img.OCIv1.Config
}

// imageFiles exports an image as an OCI archive and returns the regular files of its layers by
// path, each with its mode and the SHA-256 of its content.
func imageFiles(t *testing.T, env []string, tool, image string) map[string]imageFile {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "image.tar")
	if filepath.Base(tool) == "podman" {
		run(t, env, tool, "save", "--quiet", "--format", "oci-archive", "--output", archive, image)
	} else {
		run(t, env, tool, "push", "--quiet", image, "oci-archive:"+archive)
	}
	blobs := map[string][]byte{}
	var index []byte
	readTar(t, mustOpen(t, archive), func(h *tar.Header, r io.Reader) {
		b, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "index.json" {
			index = b
		} else if d, ok := strings.CutPrefix(h.Name, "blobs/sha256/"); ok {
			blobs["sha256:"+d] = b
		}
	})
	var idx struct{ Manifests []struct{ Digest string } }
	if err := json.Unmarshal(index, &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json %s: %v", index, err)
	}
	var manifest struct{ Layers []struct{ Digest string } }
	if err := json.Unmarshal(blobs[idx.Manifests[0].Digest], &manifest); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	files := map[string]imageFile{}
	for _, l := range manifest.Layers {
		layer := blobs[l.Digest]
		var r io.Reader = bytes.NewReader(layer)
		if bytes.HasPrefix(layer, []byte{0x1f, 0x8b}) {
			gz, err := gzip.NewReader(r)
			if err != nil {
				t.Fatal(err)
			}
			r = gz
		}
		readTar(t, r, func(h *tar.Header, r io.Reader) {
			if h.Typeflag != tar.TypeReg {
				return
			}
			sum := sha256.New()
			var head bytes.Buffer
			if _, err := io.Copy(io.MultiWriter(sum, &limitedBuffer{&head, 4096}), r); err != nil {
				t.Fatal(err)
			}
			files[path.Clean("/"+h.Name)] = imageFile{Mode: h.FileInfo().Mode().Perm(), UID: h.Uid, SHA256: fmt.Sprintf("%x", sum.Sum(nil)), Head: head.String()}
		})
	}
	return files
}

type imageFile struct {
	Mode   os.FileMode
	UID    int
	SHA256 string
	Head   string // the first 4 KiB
}

type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func mustOpen(t *testing.T, name string) io.Reader {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b)
}

func readTar(t *testing.T, r io.Reader, each func(*tar.Header, io.Reader)) {
	t.Helper()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		each(h, tr)
	}
}

func sha256File(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// makefileDefault reads a variable's default (`NAME ?= value`) from the Makefile.
func makefileDefault(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*\?=\s*(\S+)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("the Makefile sets no %s ?= default", name)
	}
	return string(m[1])
}

// The manifests run the image the Makefile builds: the Deployment names $(IMAGE_REPO):latest,
// which `make image` tags, and the kustomization that points them at a registry's image
// replaces exactly that name.
func TestManifestsNameTheImageMakeBuilds(t *testing.T) {
	repo := makefileDefault(t, "IMAGE_REPO")
	docs := manifests(t)
	c := at(t, docs["Deployment"], "spec", "template", "spec", "containers", 0)
	if got := at(t, c, "image"); got != repo+":latest" {
		t.Errorf("the Deployment runs %v; make image builds %s:latest", got, repo)
	}
	if at(t, c, "imagePullPolicy") != "IfNotPresent" {
		t.Error("a locally built image must not be pulled: imagePullPolicy IfNotPresent")
	}
	k := docs["Kustomization"]
	if k == nil {
		t.Fatal("no kustomization.yaml in deploy/kubernetes")
	}
	if res := at(t, k, "resources").([]any); !slices.Contains(res, any("narwhal.yaml")) {
		t.Errorf("the kustomization's resources %v do not include narwhal.yaml", res)
	}
	if name := at(t, k, "images", 0, "name"); name != repo {
		t.Errorf("the kustomization replaces the image %v, not %s (the Deployment's)", name, repo)
	}
}

// TestImageBuildsWithoutARegistry runs `make image-package` — what `make image` runs after
// `make build` with CGO_ENABLED=0 — with each container tool installed here, into a private
// image store, and inspects the result as a deployer would: the tags the manifests name, a
// numeric non-root user, `narwhal serve` as entrypoint, the exposed ports, the version and
// revision labels, and the files (the very binary that was built, the CA bundle, the user).
func TestImageBuildsWithoutARegistry(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and an image")
	}
	tools := imageTools(t)
	bin := staticBinary(t)
	repo := makefileDefault(t, "IMAGE_REPO")
	const revision = "0123456789abcdef0123456789abcdef01234567"
	for _, tool := range tools {
		t.Run(filepath.Base(tool), func(t *testing.T) {
			env := privateStorage(t)
			version := "v0.0.0-test-" + filepath.Base(tool)
			run(t, env, "make", "--no-print-directory", "-C", "..", "image-package", "BIN="+bin, "CONTAINER_BUILD="+tool,
				"IMAGE_CONTEXT="+filepath.Join(t.TempDir(), "context"), "VERSION="+version, "REVISION="+revision)
			inspector := tools[0] // podman where installed: podman image inspect
			id, cfg := inspect(t, env, inspector, repo+":"+version)
			if latest, _ := inspect(t, env, inspector, repo+":latest"); latest != id {
				t.Errorf("%s:latest is %s, %s:%s is %s: make image tags one image twice", repo, latest, repo, version, id)
			}
			uid, gid, _ := strings.Cut(cfg.User, ":")
			if n, err := strconv.Atoi(uid); err != nil || n == 0 || gid == "" {
				t.Errorf("user %q: want a numeric non-root uid:gid", cfg.User)
			}
			if got := strings.Join(cfg.Entrypoint, " "); got != "/usr/local/bin/narwhal serve" {
				t.Errorf("entrypoint %q", cfg.Entrypoint)
			}
			if got := strings.Join(cfg.Cmd, " "); got != "--config /etc/narwhal/narwhal.yaml" {
				t.Errorf("cmd %q", cfg.Cmd)
			}
			for _, p := range []string{"8000/tcp", "8001/tcp"} {
				if _, ok := cfg.ExposedPorts[p]; !ok {
					t.Errorf("port %s is not exposed (%v)", p, cfg.ExposedPorts)
				}
			}
			if v, r := cfg.Labels["org.opencontainers.image.version"], cfg.Labels["org.opencontainers.image.revision"]; v != version || r != revision {
				t.Errorf("labels version %q revision %q, want %q %q", v, r, version, revision)
			}
			t.Logf("%s image inspect %s:%s: user %s, entrypoint %q, cmd %q, ports %v, labels %v",
				filepath.Base(inspector), repo, version, cfg.User, cfg.Entrypoint, cfg.Cmd, slices.Sorted(maps.Keys(cfg.ExposedPorts)), cfg.Labels)

			files := imageFiles(t, env, inspector, repo+":"+version)
			if f, ok := files["/usr/local/bin/narwhal"]; !ok || f.SHA256 != sha256File(t, bin) || f.Mode&0o111 == 0 {
				t.Errorf("/usr/local/bin/narwhal in the image: %+v; want the built binary (sha256 %s), executable", f, sha256File(t, bin))
			}
			if f := files["/etc/ssl/certs/ca-certificates.crt"]; !strings.Contains(f.Head, "BEGIN CERTIFICATE") {
				t.Error("the image has no CA bundle at /etc/ssl/certs/ca-certificates.crt")
			}
			if f := files["/etc/passwd"]; !strings.Contains(f.Head, ":"+uid+":"+gid+":") {
				t.Errorf("/etc/passwd names no user %s:%s: %q", uid, gid, f.Head)
			}
			var names []string
			for name := range files {
				names = append(names, name)
			}
			if want := []string{"/etc/group", "/etc/passwd", "/etc/ssl/certs/ca-certificates.crt", "/usr/local/bin/narwhal"}; !slices.Equal(slices.Sorted(slices.Values(names)), want) {
				t.Errorf("the image holds %v, want exactly %v", slices.Sorted(slices.Values(names)), want)
			}
		})
	}
}

// TestContainerIgnoreKeepsTheContextToSources builds an image that copies its whole build
// context, from a tree with the repository's .containerignore and a file in each place it must
// leave out, and lists what arrived: the sources, no VCS history, build output, JavaScript
// packages or bench results.
func TestContainerIgnoreKeepsTheContextToSources(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an image")
	}
	tools := imageTools(t)
	ctx := t.TempDir()
	ignore, err := os.ReadFile("../.containerignore")
	if err != nil {
		t.Fatal(err)
	}
	if docker, err := os.ReadFile("../.dockerignore"); err != nil || !bytes.Equal(docker, ignore) {
		t.Errorf(".dockerignore (%v) is not .containerignore: docker would send another context", err)
	}
	kept := []string{"go.mod", "main.go", "tests/sdk/check.mjs", "tests/sdk/package-lock.json", "deploy/Containerfile", "python/narwhal/__init__.py"}
	dropped := []string{".git/HEAD", "bin/narwhal", "bin/image/narwhal", "tests/sdk/node_modules/openai/index.js",
		"bench/out/fleet/ttft.png", "python/narwhal/__pycache__/client.cpython-311.pyc", "narwhal", "transport.test", "cpu.prof"}
	for _, name := range append(append([]string{}, kept...), dropped...) {
		p := filepath.Join(ctx, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ctx, ".containerignore"), ignore, 0o644); err != nil {
		t.Fatal(err)
	}
	recipe := filepath.Join(t.TempDir(), "Containerfile")
	if err := os.WriteFile(recipe, []byte("FROM scratch\nCOPY . /context/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := privateStorage(t)
	run(t, env, tools[0], "build", "--quiet", "--file", recipe, "--tag", "localhost/narwhal-context-probe", ctx)
	files := imageFiles(t, env, tools[0], "localhost/narwhal-context-probe")
	for _, name := range kept {
		if _, ok := files["/context/"+name]; !ok {
			t.Errorf("%s did not reach the build context", name)
		}
	}
	for _, name := range dropped {
		if _, ok := files["/context/"+name]; ok {
			t.Errorf("%s reached the build context; .containerignore must leave it out", name)
		}
	}
}
