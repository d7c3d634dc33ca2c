package pathmap

import (
	"fmt"
	"strings"
)

// MapEnv maps the environment given to a kernel in a sandbox ("KEY=VALUE" entries, in
// order) from host paths to sandbox paths:
//
//   - a value that is one absolute path (starts with "/", has no ":") gets its sandbox
//     path (ToSandbox), or the entry is left out with a diagnostic when no mount holds it;
//   - a value that is a ":"-separated list whose every non-empty element is an absolute
//     path (PATH, PYTHONPATH) gets each element mapped; an element no mount holds is left
//     out of the list with a diagnostic, and an entry left with no element is left out;
//   - every other entry (not a path, a relative path, a URL, no "=") is kept as it is.
//
// Diagnostics are for the operator and name host paths; they never reach the sandbox.
func (m *Map) MapEnv(env []string) (mapped []string, diagnostics []string) {
	mapped = make([]string, 0, len(env))
	for _, kv := range env {
		key, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(val, "/") {
			mapped = append(mapped, kv)
			continue
		}
		elems := strings.Split(val, ":")
		isList := true
		for _, e := range elems {
			if e != "" && !strings.HasPrefix(e, "/") {
				isList = false
				break
			}
		}
		if !isList {
			mapped = append(mapped, kv)
			continue
		}
		out := elems[:0:0]
		kept := 0
		for _, e := range elems {
			if e == "" {
				out = append(out, e)
				continue
			}
			sb, err := m.ToSandbox(e)
			if err != nil {
				diagnostics = append(diagnostics, fmt.Sprintf("env %s: host path %q is in no mount: left out", key, e))
				continue
			}
			out = append(out, sb)
			kept++
		}
		if kept == 0 {
			if len(elems) > 1 {
				diagnostics = append(diagnostics, fmt.Sprintf("env %s: no element is in a mount: entry left out", key))
			}
			continue
		}
		mapped = append(mapped, key+"="+strings.Join(out, ":"))
	}
	return mapped, diagnostics
}
