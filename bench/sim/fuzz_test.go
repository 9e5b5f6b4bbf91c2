package sim

import (
	"strings"
	"testing"
)

// FuzzParseDirectives checks the fault-directive parser against any prompt text: it must never
// panic, an error must name the directive it refused, and an accepted directive must parse alone.
func FuzzParseDirectives(f *testing.F) {
	for _, s := range []string{
		"hi @sim:decode.silence_after=2 there", "@sim:prefill.status=500@sim:any.refuse",
		"@sim:decode.error_in_stream=500@3", "@sim:decode.keep_alive=0", "@sim:", "@sim:decode.",
		"@sim:prefill.bad_descriptor=wrong_endpoint\t@sim:decode.tool_call", "@sim:decode.slow_first_token=-1",
		"@sim:any.close_after=99999999999999999999",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, text string, chat bool) {
		faults, err := parseDirectives(text, chat)
		if err != nil {
			if !strings.Contains(err.Error(), directivePrefix) {
				t.Fatalf("error %q does not name the directive", err)
			}
			return
		}
		for _, ft := range faults {
			if _, err := parseFault(ft.spec); err != nil {
				t.Fatalf("accepted %q in %q, but alone it fails: %v", ft.spec, text, err)
			}
		}
	})
}
