package images

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// probeProgram prints the interpreter's real path and version. Run with -I -S, it
// costs one bare start of the interpreter behind any shim.
const probeProgram = "import sys;v=sys.version_info;sys.stdout.write('%s\\n%d.%d.%d\\n'%(sys.executable,v[0],v[1],v[2]))"

// ResolvePython finds the real interpreter behind name (default "python3"): a name
// without a slash is looked up on PATH, and the interpreter found there (often a shim
// such as pyenv's, a shell script that costs ~0.5 s a start) is asked once for its
// sys.executable. It returns that absolute path, which starts fast every time.
//
// The interpreter must be Python 3.9 or newer. Any failure is a *PythonError matching
// ErrNoPython (class errdefs.ErrUnavailable) that names the fix.
func ResolvePython(ctx context.Context, name string) (string, error) {
	name = cmp.Or(name, "python3")
	found, err := exec.LookPath(name)
	if err != nil {
		return "", &PythonError{Name: name, Reason: "not found", Err: err}
	}
	cmd := exec.CommandContext(ctx, found, "-I", "-S", "-c", probeProgram)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.Stdin = nil
	if err := cmd.Run(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return "", fmt.Errorf("resolve python %q: %w", name, ctxErr)
		}
		return "", &PythonError{Name: name, Reason: "does not run: " + excerpt(stderr.Bytes()), Err: err}
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 2 {
		return "", &PythonError{Name: name, Reason: "answered " + strconv.Quote(excerpt(stdout.Bytes()))}
	}
	exe, version := strings.TrimSpace(lines[0]), strings.TrimSpace(lines[1])
	if !filepath.IsAbs(exe) {
		return "", &PythonError{Name: name, Reason: "reports no absolute sys.executable (" + strconv.Quote(exe) + ")"}
	}
	if !atLeast39(version) {
		return "", &PythonError{Name: name, Reason: "is Python " + version}
	}
	if info, err := os.Stat(exe); err != nil {
		return "", &PythonError{Name: name, Reason: "reports a sys.executable that is not there", Err: err}
	} else if info.IsDir() || info.Mode().Perm()&0o111 == 0 {
		return "", &PythonError{Name: name, Reason: "reports a sys.executable that is not executable", Err: errors.New(exe)}
	}
	return exe, nil
}

func atLeast39(version string) bool {
	parts := strings.SplitN(version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > 3 || (major == 3 && minor >= 9)
}

// excerpt bounds text from a process for an error message.
func excerpt(b []byte) string {
	const limit = 512
	s := strings.TrimSpace(string(b))
	if len(s) > limit {
		s = s[:limit] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
