package settings

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/kennel-dev/kennel/sessionspec"
)

// Scope says which settings files may set a key.
type Scope uint8

const (
	// ProjectAllowed keys can be set globally and by a project (a trusted one, when the
	// key runs code or is a limit).
	ProjectAllowed Scope = iota
	// GlobalOnly keys are set by the global file alone; a project's entry is withheld.
	GlobalOnly
)

// Key declares one top-level key of settings.json: the one place that says what it
// holds and who may set it.
type Key struct {
	// ID is the key's name in settings.json.
	ID string
	// Type describes the value it holds, for people.
	Type string
	// Scope says which files may set it.
	Scope Scope
	// RunsCode marks a key whose value makes the host run a command or trust code; an
	// untrusted project cannot set it.
	RunsCode bool
	// Limit marks a key that bounds a resource or an output; an untrusted project cannot
	// set it.
	Limit bool
	// Default is the value when no file sets it, as JSON ("null": none).
	Default json.RawMessage
	// Doc says what it does.
	Doc string

	decode func(n *node, ptr string, s *Settings, bad badFunc)
	copyTo func(dst, src *Settings) // dst takes src's value of the key, whole
	isSet  func(s *Settings) bool
	value  func(s *Settings) any
}

// guarded reports whether an untrusted project's entry of k is withheld.
func (k *Key) guarded() bool { return k.RunsCode || k.Limit || k.Scope == GlobalOnly }

// badFunc records a bad leaf at ptr.
type badFunc func(ptr string, err error)

// versionKey is the document's format version: absent or 1.
const versionKey = "version"

// keys is the table of declared keys, in the order they are documented.
var keys = []*Key{
	{
		ID: "kernelTransport", Type: "object {local | argvPrefix | docker | ssh | containerd, python, pathMap, env}",
		Scope: ProjectAllowed, RunsCode: true, Default: json.RawMessage("null"),
		Doc:    "where kernels run: unset (or {\"local\": {}}) runs them on the host; argvPrefix wraps the kernel command, docker runs it in a locked-down container, containerd in a locked-down container of containerd, ssh on a remote host (one unit: a project entry replaces the global one whole; a unit with a bad field starts no kernel)",
		decode: decodeKernelTransport,
		copyTo: func(d, s *Settings) {
			d.KernelTransport, d.kernelTransportErr = s.KernelTransport, s.kernelTransportErr
		},
		isSet: func(s *Settings) bool { return s.KernelTransport != nil },
		value: func(s *Settings) any { return s.KernelTransport },
	},
	{
		ID: "trustedProjects", Type: "array of absolute paths",
		Scope: GlobalOnly, RunsCode: true, Default: json.RawMessage("[]"),
		Doc:    "projects whose settings may run code and change limits",
		decode: decodeTrustedProjects,
		copyTo: func(d, s *Settings) { d.TrustedProjects = s.TrustedProjects },
		isSet:  func(s *Settings) bool { return s.TrustedProjects != nil },
		value:  func(s *Settings) any { return s.TrustedProjects },
	},
	{
		ID: "truncation", Type: `"off" or object {bytes, lines, keep}`,
		Scope: ProjectAllowed, Limit: true, Default: json.RawMessage(`{"bytes":51200,"lines":2000,"keep":"head"}`),
		Doc:    "bounds every output a call, cell or job of `kennel run` reports (daemon sessions take their limits from the API)",
		decode: decodeTruncation,
		copyTo: func(d, s *Settings) { d.Truncation = s.Truncation },
		isSet:  func(s *Settings) bool { return s.Truncation != nil },
		value:  func(s *Settings) any { return s.Truncation },
	},
	{
		ID: "kernelMemory", Type: "a whole number of bytes, or -1",
		Scope: ProjectAllowed, Limit: true, Default: json.RawMessage("268435456"),
		Doc:    "caps the resident memory of `kennel run`'s kernel (KENNEL_KERNEL_MEMORY_BYTES): a cell running past it is interrupted with reason memory and the namespace kept; -1: no cap. A guard sampled every 100 ms, not an allocator limit: the sandbox's memory limit stays the hard bound (daemon sessions take it from the API's limits)",
		decode: decodeKernelMemory,
		copyTo: func(d, s *Settings) { d.KernelMemory = s.KernelMemory },
		isSet:  func(s *Settings) bool { return s.KernelMemory != nil },
		value:  func(s *Settings) any { return s.KernelMemory },
	},
	{
		ID: "pool", Type: "object {docker, containerd}: whole numbers of ready kernels, at most 64 each",
		Scope: GlobalOnly, Limit: true, Default: json.RawMessage("{}"),
		Doc:    "warm pools `kennel serve` keeps (--pool overrides): ready, locked-down kernels of the transport's default image and description, each handed to one session whose description matches and replaced in the background (needs a root daemon; containerd's is on the default address)",
		decode: decodePool,
		copyTo: func(d, s *Settings) { d.Pool = s.Pool },
		isSet:  func(s *Settings) bool { return s.Pool != nil },
		value:  func(s *Settings) any { return s.Pool },
	},
	{
		ID: "logLevel", Type: `"debug", "info", "warn" or "error"`,
		Scope: ProjectAllowed, Default: json.RawMessage(`"warn"`),
		Doc:    "the diagnostics level of `kennel run` and `kennel serve` (--debug: debug)",
		decode: decodeLogLevel,
		copyTo: func(d, s *Settings) { d.LogLevel = s.LogLevel },
		isSet:  func(s *Settings) bool { return s.LogLevel != "" },
		value:  func(s *Settings) any { return s.LogLevel },
	},
}

// LookupKey returns the declared key id, or false.
func LookupKey(id string) (Key, bool) {
	if k := lookup(id); k != nil {
		return *k, true
	}
	return Key{}, false
}

func lookup(id string) *Key {
	if i := slices.IndexFunc(keys, func(k *Key) bool { return k.ID == id }); i >= 0 {
		return keys[i]
	}
	return nil
}

func typeErr(want string, n *node) error {
	return fmt.Errorf("%w: want %s, got %s", ErrBadValue, want, n.kind)
}

// envName is a variable name a kernel may be given.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// absPath checks a string leaf that must be a clean absolute path.
func absPath(n *node) (string, error) {
	if n.kind != kString {
		return "", typeErr("an absolute path", n)
	}
	if !path.IsAbs(n.str) || strings.IndexByte(n.str, 0) >= 0 {
		return "", fmt.Errorf("%w: %q is not an absolute path", ErrBadValue, n.str)
	}
	return path.Clean(n.str), nil
}

// decodeKernelTransport reads the unit with sessionspec.Decode, the one decoder of
// transport descriptions: every bad field is a problem at its pointer (undeclared for a
// field no description has), and a unit with any is kept present but unusable, so no
// kernel starts (not a lower layer's transport, not a local kernel: neither is what was
// written).
func decodeKernelTransport(n *node, ptr string, s *Settings, bad badFunc) {
	raw, err := n.MarshalJSON()
	if err == nil {
		var kt *KernelTransport
		if kt, err = sessionspec.Decode(raw); err == nil {
			s.KernelTransport, s.kernelTransportErr = kt, nil
			return
		}
	}
	for _, e := range flattenErrs(err) {
		var fe *sessionspec.FieldError
		switch {
		case errors.As(e, &fe) && fe.Unknown:
			bad(ptr+fe.Pointer(), ErrUndeclared)
		case errors.As(e, &fe):
			bad(ptr+fe.Pointer(), fmt.Errorf("%w: %w", ErrBadValue, fe.Err))
		default:
			bad(ptr, fmt.Errorf("%w: %w", ErrBadValue, e))
		}
	}
	s.KernelTransport = &KernelTransport{}
	s.kernelTransportErr = fmt.Errorf("kernel transport: %w: %w", ErrBadValue, err)
}

// flattenErrs lists the errors a join holds.
func flattenErrs(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flattenErrs(e)...)
		}
		return out
	}
	return []error{err}
}

func decodeTrustedProjects(n *node, ptr string, s *Settings, bad badFunc) {
	if n.kind != kArray {
		bad(ptr, typeErr("an array of absolute paths", n))
		return
	}
	out := []string{}
	for i, e := range n.elems {
		p, err := absPath(e)
		if err != nil {
			bad(index(ptr, i), err)
			continue
		}
		out = append(out, p)
	}
	s.TrustedProjects = out
}

func decodeTruncation(n *node, ptr string, s *Settings, bad badFunc) {
	switch n.kind {
	case kString:
		if n.str != "off" {
			bad(ptr, fmt.Errorf(`%w: want "off" or an object`, ErrBadValue))
			return
		}
		s.Truncation = &Truncation{Off: true}
	case kObject:
		t := &Truncation{}
		for i, key := range n.keys {
			v, p := n.elems[i], child(ptr, key)
			switch key {
			case "bytes", "lines":
				// A malformed limit is dropped: the default limit applies, never none.
				x, err := wholeNumber(v)
				if err != nil {
					bad(p, err)
					continue
				}
				if key == "bytes" {
					t.Bytes = x
				} else {
					t.Lines = x
				}
			case "keep":
				if v.kind != kString || (v.str != "head" && v.str != "tail") {
					bad(p, fmt.Errorf(`%w: want "head" or "tail"`, ErrBadValue))
					continue
				}
				t.Keep = v.str
			default:
				bad(p, ErrUndeclared)
			}
		}
		s.Truncation = t
	default:
		bad(ptr, typeErr(`"off" or an object`, n))
	}
}

// MaxPool is the most ready kernels a pool keeps (the pool setting, kennel serve --pool).
const MaxPool = 64

// PoolKinds are the transports a warm pool keeps kernels of.
var PoolKinds = []string{"docker", "containerd", "kubernetes"}

// decodePool reads the pool setting: an object of a whole number (0 to MaxPool) per
// kind in PoolKinds. A bad entry is dropped: that kind has no pool.
func decodePool(n *node, ptr string, s *Settings, bad badFunc) {
	if n.kind != kObject {
		bad(ptr, typeErr("an object", n))
		return
	}
	p := Pool{}
	for i, key := range n.keys {
		v, at := n.elems[i], child(ptr, key)
		if !slices.Contains(PoolKinds, key) {
			bad(at, ErrUndeclared)
			continue
		}
		x, err := poolSize(v)
		if err != nil {
			bad(at, err)
			continue
		}
		p[key] = x
	}
	s.Pool = p
}

// poolSize reads one pool size: a whole number from 0 to MaxPool.
func poolSize(n *node) (int, error) {
	if n.kind != kNumber {
		return 0, typeErr("a whole number", n)
	}
	x, err := strconv.ParseInt(n.num.String(), 10, 64)
	if err != nil || x < 0 || x > MaxPool {
		return 0, fmt.Errorf("%w: %s is not a whole number from 0 to %d", ErrBadValue, n.num, MaxPool)
	}
	return int(x), nil
}

// wholeNumber reads a positive whole number (as an integer literal).
func wholeNumber(n *node) (int64, error) {
	if n.kind != kNumber {
		return 0, typeErr("a whole number", n)
	}
	x, err := strconv.ParseInt(n.num.String(), 10, 64)
	if err != nil || x <= 0 {
		return 0, fmt.Errorf("%w: %s is not a positive whole number", ErrBadValue, n.num)
	}
	return x, nil
}

// decodeKernelMemory reads the kernel memory cap: a positive whole number of bytes, or -1
// for none. A malformed cap is dropped: the default cap applies, never none.
func decodeKernelMemory(n *node, ptr string, s *Settings, bad badFunc) {
	if n.kind == kNumber && n.num.String() == "-1" {
		v := int64(-1)
		s.KernelMemory = &v
		return
	}
	x, err := wholeNumber(n)
	if err != nil {
		bad(ptr, fmt.Errorf("%w (or -1: no cap)", err))
		return
	}
	s.KernelMemory = &x
}

var logLevels = []string{"debug", "info", "warn", "error"}

func decodeLogLevel(n *node, ptr string, s *Settings, bad badFunc) {
	if n.kind != kString || !slices.Contains(logLevels, n.str) {
		bad(ptr, fmt.Errorf(`%w: want one of %q`, ErrBadValue, logLevels))
		return
	}
	s.LogLevel = n.str
}
