package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goTestJSON runs the real `go test -json` on a module of its own made of files.
func goTestJSON(t *testing.T, files map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/probe\n\ngo 1.26\n"
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	out, _ := cmd.Output() // a failing test is what some cases are about
	if len(out) == 0 {
		t.Fatal("go test -json printed nothing")
	}
	return out
}

const probeTests = `package probe

import "testing"

func TestPasses(t *testing.T) {}

func TestNeedsTool(t *testing.T) { t.Skip("frobnicate is not installed (Debian: apt-get install frobnicate)") }

func TestNeedsCPUs(t *testing.T) { t.Skip("needs at least 2 CPUs") }

func TestFails(t *testing.T) {
	t.Run("ok", func(t *testing.T) {})
	t.Run("broken", func(t *testing.T) {
		t.Log("what it saw")
		t.Error("status 502, want 200")
	})
}
`

func TestReportPrintsFailuresCountsAndSkips(t *testing.T) {
	stream := goTestJSON(t, map[string]string{"probe_test.go": probeTests})
	skips := filepath.Join(t.TempDir(), "skips.txt")
	var out bytes.Buffer
	err := reportGo(bytes.NewReader(stream), &out, skips)
	if err == nil || !strings.Contains(err.Error(), "2 tests failed, in 1 packages") {
		t.Fatalf("err = %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"--- FAIL: TestFails/broken", "what it saw", "status 502, want 200", "--- FAIL: TestFails (",
		"FAIL\texample.com/probe",
		"go test: 1 packages, 2 tests passed, 2 failed, 2 skipped\n",
		"  skipped: example.com/probe TestNeedsTool: frobnicate is not installed (Debian: apt-get install frobnicate)\n",
		"  skipped: example.com/probe TestNeedsCPUs: needs at least 2 CPUs\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "=== RUN") || strings.Contains(got, "--- PASS") {
		t.Errorf("the report shows passing tests' lines:\n%s", got)
	}
	b, err := os.ReadFile(skips)
	if err != nil {
		t.Fatal(err)
	}
	if want := "example.com/probe TestNeedsTool\tfrobnicate is not installed (Debian: apt-get install frobnicate)\nexample.com/probe TestNeedsCPUs\tneeds at least 2 CPUs\n"; string(b) != want {
		t.Errorf("skips file %q, want %q", b, want)
	}

	// The summary fails on the missing component, naming the test, and lists every skip.
	var sum bytes.Buffer
	other := filepath.Join(t.TempDir(), "python.txt")
	os.WriteFile(other, []byte("python test_install.Install.test_pip\tpip is not installed\n"), 0o644)
	err = summarize([]string{skips, other, filepath.Join(t.TempDir(), "absent.txt")}, &sum, false)
	if err == nil || !strings.Contains(err.Error(), "2 tests skipped for a component that is not installed") ||
		!strings.Contains(err.Error(), "example.com/probe TestNeedsTool, python test_install.Install.test_pip") {
		t.Fatalf("summary error %v", err)
	}
	if !strings.HasPrefix(sum.String(), "3 skipped: example.com/probe TestNeedsCPUs, example.com/probe TestNeedsTool, python test_install.Install.test_pip\n") {
		t.Errorf("summary:\n%s", sum.String())
	}
	sum.Reset()
	if err := summarize([]string{skips}, &sum, true); err != nil || !strings.Contains(sum.String(), "allowed by ALLOW_MISSING") {
		t.Errorf("with -allow-missing: %v\n%s", err, sum.String())
	}
}

func TestReportPassesCleanRunsAndKeepsPackageLines(t *testing.T) {
	stream := goTestJSON(t, map[string]string{"probe_test.go": "package probe\n\nimport \"testing\"\n\nfunc TestPasses(t *testing.T) { t.Log(\"quiet\") }\n"})
	skips := filepath.Join(t.TempDir(), "skips.txt")
	var out bytes.Buffer
	if err := reportGo(bytes.NewReader(stream), &out, skips); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if got := out.String(); !strings.HasPrefix(got, "ok  \texample.com/probe\t") || !strings.HasSuffix(got, "go test: 1 packages, 1 tests passed, 0 failed, 0 skipped\n") ||
		strings.Contains(got, "quiet") {
		t.Errorf("report:\n%s", got)
	}
	var sum bytes.Buffer
	if err := summarize([]string{skips}, &sum, false); err != nil || sum.String() != "0 skipped\n" {
		t.Errorf("summary %q, %v", sum.String(), err)
	}
}

func TestReportFailsABuildFailureAndPrintsTheCompilerError(t *testing.T) {
	stream := goTestJSON(t, map[string]string{"probe_test.go": "package probe\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) { undefinedThing() }\n"})
	var out bytes.Buffer
	err := reportGo(bytes.NewReader(stream), &out, "")
	if err == nil || !strings.Contains(out.String(), "undefined: undefinedThing") {
		t.Fatalf("err %v\n%s", err, out.String())
	}
}

func TestReportFailsWhenNoPackageRan(t *testing.T) {
	var out bytes.Buffer
	if err := reportGo(strings.NewReader("go: no packages to test\n"), &out, ""); err == nil || !strings.Contains(out.String(), "no packages to test") {
		t.Fatalf("err %v, output %q", err, out.String())
	}
}
