package transports

import (
	"fmt"
	"path"
	"strings"

	"github.com/containerd/errdefs"
)

// FieldError is a Spec, or a transport's Options, refused before anything started: the
// one class of such refusals. It matches errdefs.ErrInvalidArgument (errors.Is). Its
// text names the field and never quotes an environment value, which may be a secret.
type FieldError struct {
	// Field names what was refused: "Spec.Dir", "Spec.Env[2]", "Options.StubDir".
	Field string
	// Reason says what is wrong with it.
	Reason string
}

// Error reads "invalid FIELD: REASON".
func (e *FieldError) Error() string { return "invalid " + e.Field + ": " + e.Reason }

// Unwrap returns errdefs.ErrInvalidArgument.
func (e *FieldError) Unwrap() error { return errdefs.ErrInvalidArgument }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

var reserved = map[string]bool{
	"KENNEL_KERNEL_BUNDLE":    true,
	"KENNEL_KERNEL_OWNER":     true,
	"KENNEL_KERNEL_OWNER_PID": true,
	"KENNEL_KERNEL_EOF_GRACE": true,
	"KENNEL_REMOTE_RUN":       true,
	"KENNEL_KERNEL_RUN":       true,
	"KENNEL_KERNEL_POOLED":    true,
}

// Reserved reports whether key is one of the environment keys only a transport sets, the
// entries that keep a kernel tied to its controller: the stub's bundle hash, its owner (a
// pid, or stdin) and EOF grace, and the run marker of a kernel reached by no host pid
// (KENNEL_KERNEL_BUNDLE, KENNEL_KERNEL_OWNER, KENNEL_KERNEL_OWNER_PID,
// KENNEL_KERNEL_EOF_GRACE, KENNEL_REMOTE_RUN), and the run directory of a detached kernel
// (KENNEL_KERNEL_RUN) and its pool mark (KENNEL_KERNEL_POOLED). A Spec.Env entry naming one is refused
// (CheckSpec), so no caller can turn off a guard its transport relies on (a sandboxed
// kernel told to watch a host pid instead of its stdin, say). Other KENNEL_KERNEL_*
// knobs (KENNEL_KERNEL_SITE) are the caller's.
func Reserved(key string) bool { return reserved[key] }

// CheckSpec refuses a Spec no transport starts a kernel from, before anything runs;
// every transport's Start calls it first. The rules:
//
//   - SessionID is set and holds no NUL byte;
//   - Dir is an absolute path (in the sandbox's terms: '/'-rooted) without NUL;
//   - each Env entry is KEY=VALUE with a non-empty key, no NUL anywhere, and a key
//     that is not Reserved;
//   - Python, when set, passes CheckPython.
//
// A refusal is a *FieldError (errdefs.ErrInvalidArgument). What only a transport can
// tell (a local directory that does not exist, a start block over its limit) it checks
// itself, with the same class.
func CheckSpec(spec Spec) error {
	switch {
	case spec.SessionID == "":
		return invalid("Spec.SessionID", "empty")
	case strings.IndexByte(spec.SessionID, 0) >= 0:
		return invalid("Spec.SessionID", "holds a NUL byte")
	}
	if err := CheckPath("Spec.Dir", spec.Dir); err != nil {
		return err
	}
	for i, kv := range spec.Env {
		field := fmt.Sprintf("Spec.Env[%d]", i)
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return invalid(field, "not KEY=VALUE")
		case strings.IndexByte(kv, 0) >= 0:
			return invalid(field, "holds a NUL byte")
		case Reserved(k):
			return invalid(field, "%s is set by the transport alone", k)
		}
	}
	if spec.Python != "" {
		return CheckPython("Spec.Python", spec.Python)
	}
	return nil
}

// CheckPath refuses a path that is not absolute ('/'-rooted) or holds a NUL byte, naming
// field.
func CheckPath(field, p string) error {
	if !path.IsAbs(p) || strings.IndexByte(p, 0) >= 0 {
		return invalid(field, "%q is not an absolute path without NUL", p)
	}
	return nil
}

// CheckPython refuses an interpreter that cannot be run by name or path wherever a
// kernel starts: empty, starting with '-' (an option), or holding NUL, a newline or '='
// (an argv element, a line of a start protocol, an `env` assignment). It names field.
func CheckPython(field, python string) error {
	if python == "" || strings.HasPrefix(python, "-") || strings.ContainsAny(python, "\x00\n=") {
		return invalid(field, "%q cannot be run by name or path", python)
	}
	return nil
}
