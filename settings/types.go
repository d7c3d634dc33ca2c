package settings

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/pathmap"
)

// Settings are the values of the declared keys (see Keys). A nil or empty field is unset:
// its setting has its default.
type Settings struct {
	// KernelTransport selects where kernels run; nil runs them locally.
	KernelTransport *KernelTransport `json:"kernelTransport,omitempty"`
	// TrustedProjects lists the absolute paths of the projects whose settings may run
	// code and change limits. Only the global file sets it.
	TrustedProjects []string `json:"trustedProjects,omitempty"`
	// Truncation bounds every output; nil is the default (50 KiB, 2000 lines, head).
	Truncation *Truncation `json:"truncation,omitempty"`
	// LogLevel is the controller's diagnostics level ("debug", "info", "warn", "error");
	// "" is the default, "warn".
	LogLevel string `json:"logLevel,omitempty"`
}

// KernelTransport is the kernelTransport setting: one unit, which a project's entry
// replaces whole (a project never takes a field from the global entry).
type KernelTransport struct {
	// ArgvPrefix is the wrapper command the kernel command runs under (see package
	// transports/wrapped): ["docker", "exec", "-i", "box"].
	ArgvPrefix []string `json:"argvPrefix,omitempty"`
	// Python is the interpreter inside the sandbox; "" means "python3".
	Python string `json:"python,omitempty"`
	// PathMap lists the shared mounts: each is one directory at its sandbox and its host
	// path. Empty maps the session's directory to itself.
	PathMap []pathmap.Mount `json:"pathMap,omitempty"`
	// Env names host variables the kernel gets (their values, mapped through the path
	// map).
	Env []string `json:"env,omitempty"`
	// Docker and SSH are the fields of transports still to come, kept as written.
	Docker json.RawMessage `json:"docker,omitempty"`
	SSH    json.RawMessage `json:"ssh,omitempty"`
}

// ErrNoWrapper reports a kernelTransport that names no wrapper: it cannot run a kernel,
// and must not fall back to running one locally.
var ErrNoWrapper = errors.New("kernelTransport names no wrapper (argvPrefix)")

// Validate reports whether the unit can start a kernel as written. A unit whose
// argvPrefix was dropped as a bad leaf fails here: a session refuses to start rather than
// run the kernel somewhere the operator did not choose.
func (t *KernelTransport) Validate() error {
	if len(t.ArgvPrefix) == 0 && t.Docker == nil && t.SSH == nil {
		return fmt.Errorf("validate kernel transport: %w", ErrNoWrapper)
	}
	return nil
}

// HostEnv returns "KEY=VALUE" for each variable Env names that lookup finds (os.LookupEnv
// on the host), in Env's order. Values are the host's: map them with pathmap.Map.MapEnv
// before they reach a sandbox.
func (t *KernelTransport) HostEnv(lookup func(string) (string, bool)) []string {
	var out []string
	for _, name := range t.Env {
		if v, ok := lookup(name); ok {
			out = append(out, name+"="+v)
		}
	}
	return out
}

// Truncation is the truncation setting: "off", or limits. Zero Bytes or Lines take the
// output package's defaults.
type Truncation struct {
	// Off keeps every byte of every output.
	Off bool
	// Bytes and Lines bound a kept window; zero is the default.
	Bytes int64
	Lines int64
	// Keep is "head" (the default when "") or "tail".
	Keep string
}

// Output returns the output package's value of t.
func (t Truncation) Output() output.Truncation {
	if t.Off {
		return output.Off()
	}
	keep := output.Head
	if t.Keep == "tail" {
		keep = output.Tail
	}
	return output.On(output.Limits{Bytes: t.Bytes, Lines: t.Lines, Keep: keep})
}

// MarshalJSON writes "off" or {"bytes":..,"lines":..,"keep":..} with the set fields.
func (t Truncation) MarshalJSON() ([]byte, error) {
	if t.Off {
		return []byte(`"off"`), nil
	}
	type limits struct {
		Bytes int64  `json:"bytes,omitempty"`
		Lines int64  `json:"lines,omitempty"`
		Keep  string `json:"keep,omitempty"`
	}
	return json.Marshal(limits{t.Bytes, t.Lines, t.Keep})
}
