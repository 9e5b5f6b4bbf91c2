package main

import (
	"go/build"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/narwhal-router/narwhal"

// docs/architecture.md draws the import graph the code has: its graph block lists every package
// of the router (everything but bench/ and tests/) with exactly the packages of Narwhal's it
// imports. A change that adds an import, or a package, updates the drawing or fails here.
func TestArchitectureDocDrawsTheImportGraph(t *testing.T) {
	want := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		switch path {
		case "bench", "tests", "python", "deploy", "docs", "testdata", "bin", ".git":
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go package here
		}
		name := "narwhal"
		if path != "." {
			name = filepath.ToSlash(path)
		}
		var deps []string
		for _, imp := range pkg.Imports {
			if imp == module {
				deps = append(deps, "narwhal")
			} else if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
				deps = append(deps, rest)
			}
		}
		slices.Sort(deps)
		want[name] = deps
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	got := drawnGraph(t, string(doc))
	for name, deps := range want {
		drawn, ok := got[name]
		if !ok {
			t.Errorf("docs/architecture.md does not draw package %s (it imports %v)", name, deps)
			continue
		}
		if !slices.Equal(drawn, deps) {
			t.Errorf("docs/architecture.md draws %s ─► %v; the code imports %v", name, drawn, deps)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("docs/architecture.md draws %s, which is not a package of the router", name)
		}
	}
}

// drawnGraph reads the graph block of the architecture document: the fenced block after the
// line "<!-- import graph -->", one package a line, as `[layer N]  pkg ─► dep, dep` or
// `pkg ─► nothing of ours`.
func drawnGraph(t *testing.T, doc string) map[string][]string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "<!-- import graph -->")
	if !ok {
		t.Fatal(`docs/architecture.md has no "<!-- import graph -->" marker before its graph block`)
	}
	_, rest, _ = strings.Cut(rest, "```\n")
	block, _, _ := strings.Cut(rest, "```")
	out := map[string][]string{}
	for _, line := range strings.Split(block, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		left, right, ok := strings.Cut(line, "─►")
		if !ok {
			t.Fatalf("graph line %q has no ─►", line)
		}
		fields := strings.Fields(left)
		if len(fields) >= 2 && fields[0] == "layer" {
			fields = fields[2:]
		}
		if len(fields) != 1 {
			t.Fatalf("graph line %q: want one package left of ─►", line)
		}
		var deps []string
		if r := strings.TrimSpace(right); r != "nothing of ours" {
			for _, d := range strings.Split(r, ",") {
				deps = append(deps, strings.TrimSpace(d))
			}
		}
		slices.Sort(deps)
		out[fields[0]] = deps
	}
	return out
}
