package settings

import (
	"encoding/json"

	"github.com/kennel-dev/kennel/output"
	"github.com/kennel-dev/kennel/sessionspec"
)

// Settings are the values of the declared keys (see LookupKey). A nil or empty field is unset:
// its setting has its default.
type Settings struct {
	// KernelTransport selects where kernels run; nil runs them locally. A unit with a bad
	// field is refused whole: see Result.KernelTransport.
	KernelTransport *KernelTransport `json:"kernelTransport,omitempty"`
	// kernelTransportErr is why the file's kernelTransport cannot be used (its bad fields),
	// or nil; it travels with KernelTransport.
	kernelTransportErr error
	// TrustedProjects lists the absolute paths of the projects whose settings may run
	// code and change limits. Only the global file sets it.
	TrustedProjects []string `json:"trustedProjects,omitempty"`
	// Truncation bounds every output; nil is the default (50 KiB, 2000 lines, head).
	Truncation *Truncation `json:"truncation,omitempty"`
	// KernelMemory caps the kernel's resident memory in bytes (controller.Options.
	// KernelMemory); nil is the default (256 MiB), -1 none.
	KernelMemory *int64 `json:"kernelMemory,omitempty"`
	// Pool is how many ready kernels `kennel serve` keeps per transport kind (the pool
	// setting, global only); nil or a kind left out: none.
	Pool Pool `json:"pool,omitempty"`
	// LogLevel is the controller's diagnostics level ("debug", "info", "warn", "error");
	// "" is the default, "warn".
	LogLevel string `json:"logLevel,omitempty"`
}

// Pool is the pool setting: ready kernels to keep, by transport kind (PoolKinds).
type Pool map[string]int

// KernelTransport is the kernelTransport setting: one unit (sessionspec.Transport, whose
// JSON it is), which a project's entry replaces whole (a project never takes a field from
// the global entry).
type KernelTransport = sessionspec.Transport

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
