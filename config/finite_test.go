package config

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

// floatKeys derives from the configuration types every key whose value is a float (a ratio, a
// fraction, a duration in seconds): a key added later is found without being listed here.
func floatKeys(t reflect.Type, prefix string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		for i := range t.NumField() {
			if name := yamlName(t.Field(i)); name != "" {
				floatKeys(t.Field(i).Type, joinPath(prefix, name), out)
			}
		}
	case reflect.Slice:
		floatKeys(t.Elem(), prefix+"[]", out)
	case reflect.Float32, reflect.Float64:
		*out = append(*out, prefix)
	}
}

// yamlSetting is a document that sets the key at path to v (a segment ending in [] meaning a
// list with one item: engines[] the first engine), beside the two engines every file needs.
func yamlSetting(path, v string) string {
	engines := "engines:\n  - {name: p0, url: \"http://127.0.0.1:8100\", role: prefill%s}\n  - {name: d0, url: \"http://127.0.0.1:8200\", role: decode}\n"
	if rest, ok := strings.CutPrefix(path, "engines[]."); ok {
		keys := strings.Split(rest, ".")
		return strings.Replace(engines, "%s", ", "+strings.TrimSuffix(strings.TrimPrefix(flowMap(keys, v), "{"), "}"), 1)
	}
	top := strings.TrimSuffix(strings.TrimPrefix(flowMap(strings.Split(path, "."), v), "{"), "}")
	return top + "\n" + strings.Replace(engines, "%s", "", 1)
}

// flowMap is the YAML flow mapping that holds keys[0] and, nested below it, the rest of the
// keys down to v.
func flowMap(keys []string, v string) string {
	if len(keys) == 0 {
		return v
	}
	k, list := strings.CutSuffix(keys[0], "[]")
	inner := flowMap(keys[1:], v)
	if list {
		inner = "[" + inner + "]"
	}
	return "{" + k + ": " + inner + "}"
}

// Every float key refuses NaN and ±Inf, in a file and in a configuration built in Go, naming the
// key (issue 26, item 7: placement.load_factor and disaggregation.prefill_saturation took them).
func TestEveryFloatKeyRejectsNonFiniteValues(t *testing.T) {
	var keys []string
	floatKeys(reflect.TypeOf(Config{}), "", &keys)
	if len(keys) < 25 {
		t.Fatalf("only %d float keys found: %v", len(keys), keys)
	}
	for _, key := range keys {
		for _, v := range []struct{ yaml, shown string }{{".nan", "NaN"}, {".inf", "+Inf"}, {"-.inf", "-Inf"}} {
			doc := yamlSetting(key, v.yaml)
			_, err := Parse([]byte(doc), noEnv)
			path := strings.Replace(key, "[]", "[0]", 1)
			if err == nil || !strings.Contains(err.Error(), path+": ") || !strings.Contains(err.Error(), v.shown) {
				t.Errorf("%s: %s: got %v, want an error naming %s and %s\n%s", key, v.yaml, err, path, v.shown, doc)
			}
		}
	}
	// The same check holds for a configuration built in Go (Validate, which provisioning runs).
	for _, key := range keys {
		cfg, err := Parse([]byte(minimal), noEnv)
		if err != nil {
			t.Fatal(err)
		}
		setFloat(t, reflect.ValueOf(&cfg).Elem(), strings.Split(strings.Replace(key, "[]", "", 1), "."), math.NaN())
		err = cfg.validate()
		if path := strings.Replace(key, "[]", "[0]", 1); err == nil || !strings.Contains(err.Error(), path+": ") {
			t.Errorf("%s set to NaN in Go: got %v", key, err)
		}
	}
}

// setFloat sets the float field at the yaml path keys under v (an engines list: its first item).
func setFloat(t *testing.T, v reflect.Value, keys []string, f float64) {
	t.Helper()
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		v = v.Elem()
	}
	if v.Kind() == reflect.Slice {
		if v.Len() == 0 {
			v.Set(reflect.Append(v, reflect.Zero(v.Type().Elem())))
		}
		setFloat(t, v.Index(0), keys, f)
		return
	}
	if len(keys) == 0 {
		v.SetFloat(f)
		return
	}
	for i := range v.NumField() {
		if yamlName(v.Type().Field(i)) == keys[0] {
			setFloat(t, v.Field(i), keys[1:], f)
			return
		}
	}
	t.Fatalf("no key %s", keys[0])
}
