package config

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// acceptedKeys derives, from the configuration types themselves, every leaf key the parser
// accepts: a dotted path, list items written as `[]` (engines[].kv.connector).
func acceptedKeys(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct:
		for name, ft := range yamlFields(t) {
			acceptedKeys(ft, joinPath(prefix, name), out)
		}
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct:
		acceptedKeys(t.Elem(), prefix+"[]", out)
	default:
		out[prefix] = true
	}
}

func configKeys(t *testing.T) map[string]bool {
	keys := map[string]bool{}
	acceptedKeys(reflect.TypeOf(Config{}), "", keys)
	if len(keys) < 40 {
		t.Fatalf("only %d keys derived from the config types: %v", len(keys), keys)
	}
	return keys
}

// tableKey is the key column of a row in docs/configuration.md.
var tableKey = regexp.MustCompile("(?m)^\\| `([a-z_\\[\\].]+)` \\|")

func TestConfigurationPageDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range tableKey.FindAllStringSubmatch(string(b), -1) {
		documented[m[1]] = true
	}
	diff(t, "docs/configuration.md", configKeys(t), documented)
}

func TestExampleSetsEveryKey(t *testing.T) {
	b, err := os.ReadFile("../docs/narwhal.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.DocumentNode:
			walk(n.Content[0], path)
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i+1], joinPath(path, n.Content[i].Value))
			}
		case yaml.SequenceNode:
			if len(n.Content) > 0 && n.Content[0].Kind == yaml.MappingNode {
				for _, item := range n.Content {
					walk(item, path+"[]")
				}
				return
			}
			set[path] = true
		default:
			set[path] = true
		}
	}
	walk(&doc, "")
	diff(t, "docs/narwhal.example.yaml", configKeys(t), set)
}

// diff fails unless what covers exactly the accepted keys: none missing, none the parser would
// refuse.
func diff(t *testing.T, what string, accepted, covered map[string]bool) {
	t.Helper()
	var missing, unknown []string
	for k := range accepted {
		if !covered[k] {
			missing = append(missing, k)
		}
	}
	for k := range covered {
		if !accepted[k] {
			unknown = append(unknown, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	if len(missing) > 0 || len(unknown) > 0 {
		t.Fatalf("%s: missing %s; not accepted by the config package: %s", what, list(missing), list(unknown))
	}
}

func list(keys []string) string {
	if len(keys) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d (%s)", len(keys), strings.Join(keys, ", "))
}
