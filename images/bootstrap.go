package images

import (
	"archive/zip"
	"bytes"
	_ "embed"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"
)

//go:embed bootstrap.py
var bootstrapSource string

// bootstrapProgram is bootstrap.py as a -c program, the size limit filled in.
var bootstrapProgram = PythonProgram(strings.ReplaceAll(bootstrapSource, "MAX_BUNDLE", strconv.Itoa(MaxBootstrapZip)))

// PythonProgram makes an embedded Python source a -c program: the lines that are blank or
// hold only a comment are left out (every start compiles the program; comments are for
// the source file). src must hold no multi-line string whose lines could be dropped.
func PythonProgram(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "#") || t == "" {
			continue
		}
		b.WriteString(line)
	}
	return b.String()
}

// BootstrapProgram returns the -c program of BootstrapArgv, for a transport that runs it
// after a prelude of its own: it reads BootstrapPayload from stdin, checks it against the
// hash in sys.argv[1], and runs the stub from memory.
func BootstrapProgram() string { return bootstrapProgram }

// MaxBootstrapZip is the largest zip the bootstrap program accepts.
const MaxBootstrapZip = 64 << 20

// Zip returns the bundle as a zip archive: its files in path order, stored (not
// compressed), each with mode 0600 and a fixed time, so the same bundle gives the same
// bytes in every build.
func (b *Bundle) Zip() ([]byte, error) {
	var buf bytes.Buffer
	w := zip.NewWriter(&buf)
	stamp := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range b.files {
		h := &zip.FileHeader{Name: f.Path, Method: zip.Store, Modified: stamp}
		h.SetMode(0o600)
		fw, err := w.CreateHeader(h)
		if err != nil {
			return nil, fmt.Errorf("zip bundle %s: %w", f.Path, err)
		}
		if _, err := fw.Write(f.Data); err != nil {
			return nil, fmt.Errorf("zip bundle %s: %w", f.Path, err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("zip bundle: %w", err)
	}
	return buf.Bytes(), nil
}

// BootstrapArgv returns the argv that runs the stub of b without unpacking it: the
// interpreter python reads the bundle from its stdin (see BootstrapPayload), checks it
// against b's hash (which is in this argv), imports it from memory and runs it. Use it
// where the kernel's file system cannot be written to ahead of time (a container, a
// remote host): the caller writes BootstrapPayload to the kernel's stdin, then frames.
// The stub reports b's hash in its hello; a payload that does not match makes the
// process exit with status 2 before any frame.
func (b *Bundle) BootstrapArgv(python string) []string {
	return []string{python, "-I", "-S", "-c", bootstrapProgram, b.hash}
}

// BootstrapPayload returns what the bootstrap program reads from stdin: the 4-byte
// big-endian length of the bundle's zip (see Zip), then the zip.
func (b *Bundle) BootstrapPayload() ([]byte, error) {
	z, err := b.Zip()
	if err != nil {
		return nil, err
	}
	if len(z) > MaxBootstrapZip {
		return nil, fmt.Errorf("bootstrap payload of %d bytes over %d: %w", len(z), MaxBootstrapZip, ErrBootstrap)
	}
	out := make([]byte, 4, 4+len(z))
	binary.BigEndian.PutUint32(out, uint32(len(z)))
	return append(out, z...), nil
}
