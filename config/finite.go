package config

import (
	"fmt"
	"math"
	"reflect"
	"strings"
)

// checkFinite refuses every float value (a ratio, a fraction, a duration in seconds) that is NaN
// or infinite, whatever its key: found by reflection over the configuration types, so a key added
// later cannot forget the check. A key whose own check already refused its value (with the
// range it allows) is not reported twice.
func (ck *checker) checkFinite(c *Config) {
	ck.finite(reflect.ValueOf(c).Elem(), "")
}

func (ck *checker) finite(v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			ck.finite(v.Elem(), path)
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			if name := yamlName(t.Field(i)); name != "" {
				ck.finite(v.Field(i), joinPath(path, name))
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			ck.finite(v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); (math.IsNaN(f) || math.IsInf(f, 0)) && !ck.failed[path] {
			ck.fail(path, "%v is not allowed; want a finite number", f)
		}
	}
}

// yamlName is the key a struct field is written under ("" for a field the YAML never sets).
func yamlName(f reflect.StructField) string {
	if !f.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	if name == "-" {
		return ""
	}
	return name
}
