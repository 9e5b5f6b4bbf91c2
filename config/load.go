package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads, expands, strictly decodes and validates the file at path.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	cfg, err := Parse(data, os.LookupEnv)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes a YAML document on top of Default, then validates it. lookupEnv resolves
// `${NAME}` references in scalar values (os.LookupEnv in production).
func Parse(data []byte, lookupEnv func(string) (string, bool)) (Config, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Config{}, fmt.Errorf("not valid YAML: %w", err)
	}
	cfg := Default()
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return cfg, cfg.validate(nil)
	}
	root := doc.Content[0]
	lines := map[string]int{}
	if err := checkKeys(root, reflect.TypeOf(cfg), "", lines); err != nil {
		return Config{}, err
	}
	if err := expandEnv(root, lookupEnv); err != nil {
		return Config{}, err
	}
	if err := root.Decode(&cfg); err != nil {
		return Config{}, fmt.Errorf("wrong type: %w", tidyYAMLError(err))
	}
	for i := range cfg.Engines {
		cfg.Engines[i].applyDefaults()
	}
	return cfg, cfg.validate(lines)
}

// checkKeys walks the document alongside the Go type and rejects every mapping key that has no
// field, so a misspelt key fails loudly instead of silently keeping its default. It records the
// line of every path for validation messages.
func checkKeys(n *yaml.Node, t reflect.Type, path string, lines map[string]int) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	lines[path] = n.Line
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := yamlFields(t)
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i], n.Content[i+1]
			child := joinPath(path, key.Value)
			if key.Value == "<<" {
				return fmt.Errorf("line %d: merge keys (<<) are not supported", key.Line)
			}
			ft, ok := fields[key.Value]
			if !ok {
				return fmt.Errorf("line %d: unknown key %q%s (known keys: %s)",
					key.Line, key.Value, under(path), strings.Join(sortedKeys(fields), ", "))
			}
			if seen[key.Value] {
				return fmt.Errorf("line %d: key %q appears twice%s", key.Line, key.Value, under(path))
			}
			seen[key.Value] = true
			if err := checkKeys(val, ft, child, lines); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, item := range n.Content {
			if err := checkKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), lines); err != nil {
				return err
			}
		}
	}
	// Kind mismatches (a list where a mapping belongs, ...) are reported by the decoder.
	return nil
}

func yamlFields(t reflect.Type) map[string]reflect.Type {
	fields := make(map[string]reflect.Type, t.NumField())
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		fields[name] = f.Type
	}
	return fields
}

func sortedKeys(m map[string]reflect.Type) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func under(path string) string {
	if path == "" {
		return " at the top level"
	}
	return " under " + path
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces `${NAME}` in every scalar. An unset variable is an error: a secret that
// silently became "" would be far worse than a refusal to start.
func expandEnv(n *yaml.Node, lookupEnv func(string) (string, bool)) error {
	if n.Kind == yaml.ScalarNode && strings.Contains(n.Value, "${") {
		var missing string
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := ref[2 : len(ref)-1]
			v, ok := lookupEnv(name)
			if !ok && missing == "" {
				missing = name
			}
			return v
		})
		if missing != "" {
			return fmt.Errorf("line %d: environment variable %s is not set", n.Line, missing)
		}
		if n.Style == 0 {
			n.Tag = "" // let the expanded text resolve to its own type (a number stays a number)
		}
	}
	for _, c := range n.Content {
		if err := expandEnv(c, lookupEnv); err != nil {
			return err
		}
	}
	return nil
}

// tidyYAMLError strips the library's multi-line wrapper so the message fits one log line.
func tidyYAMLError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return errors.New(strings.Join(te.Errors, "; "))
	}
	return err
}
