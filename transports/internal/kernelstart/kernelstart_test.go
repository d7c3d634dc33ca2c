package kernelstart

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	"pgregory.net/rapid"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/transports"
)

// The transports' reserved keys are the stub's lifetime entries and the run marker.
func TestReservedKeysAreTheStubsLifetimeEntries(t *testing.T) {
	for _, k := range []string{images.EnvBundle, images.EnvOwner, images.EnvOwnerPID, images.EnvEOFGrace, "KENNEL_REMOTE_RUN"} {
		if !transports.Reserved(k) {
			t.Errorf("%s is not reserved", k)
		}
	}
	for _, k := range []string{images.EnvSite, "PATH", "MALLOC_MMAP_THRESHOLD_", "KENNEL_KERNEL_"} {
		if transports.Reserved(k) {
			t.Errorf("%s is reserved", k)
		}
	}
}

// envEntry draws a KEY=VALUE entry from a few keys, reserved ones among them.
func envEntry(keys ...string) *rapid.Generator[string] {
	key := rapid.SampledFrom(keys)
	return rapid.Custom(func(t *rapid.T) string {
		return key.Draw(t, "key") + "=" + rapid.StringMatching(`[a-z0-9=]{0,6}`).Draw(t, "value")
	})
}

// envMap reads an environment the way a process does: the last entry of a key wins.
func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// Build's rule: one entry per key; Base < the stub's defaults < Spec.Env < the
// transport's entries; a reserved key only ever from the transport.
func TestEnvPrecedence(t *testing.T) {
	keys := []string{"A", "PATH", "MALLOC_MMAP_THRESHOLD_", images.EnvBundle, images.EnvOwner, images.EnvOwnerPID,
		images.EnvEOFGrace, images.EnvSite, "KENNEL_REMOTE_RUN"}
	rapid.Check(t, func(t *rapid.T) {
		e := Env{
			Base:     rapid.SliceOf(envEntry(keys...)).Draw(t, "base"),
			Stub:     rapid.SliceOf(envEntry(keys...)).Draw(t, "stub"),
			OwnerPID: rapid.SampledFrom([]int{0, 1234}).Draw(t, "owner"),
			Run:      rapid.SampledFrom([]string{"", "run-1"}).Draw(t, "run"),
		}
		spec := rapid.SliceOf(envEntry(keys...)).Draw(t, "spec")
		got := e.Build(spec)
		want := map[string]string{}
		for _, layer := range [][]string{e.Base, e.Stub, spec} {
			for k, v := range envMap(layer) {
				if !transports.Reserved(k) {
					want[k] = v
				}
			}
		}
		for _, kv := range e.Stub {
			if k, v, _ := strings.Cut(kv, "="); transports.Reserved(k) {
				want[k] = v
			}
		}
		if e.OwnerPID > 0 {
			want[images.EnvOwnerPID] = "1234"
		} else {
			want[images.EnvOwner] = "stdin"
		}
		if e.Run != "" {
			want["KENNEL_REMOTE_RUN"] = e.Run
		}
		seen := map[string]bool{}
		for _, kv := range got {
			k, _, _ := strings.Cut(kv, "=")
			if seen[k] {
				t.Fatalf("key %s twice in %q", k, got)
			}
			seen[k] = true
		}
		if g := envMap(got); len(g) != len(want) {
			t.Fatalf("got %v, want %v", g, want)
		} else {
			for k, v := range want {
				if g[k] != v {
					t.Fatalf("%s=%q, want %q (got %q)", k, g[k], v, got)
				}
			}
		}
	})
}

// The EOF grace is written in seconds.
func TestEnvEOFGrace(t *testing.T) {
	got := envMap(Env{EOFGrace: 1500 * 1e6}.Build(nil))
	if got[images.EnvEOFGrace] != "1.5" || got[images.EnvOwner] != "stdin" || len(got) != 2 {
		t.Fatalf("env %v", got)
	}
}

// blockGen draws a block Encode accepts.
func blockGen() *rapid.Generator[Block] {
	return rapid.Custom(func(t *rapid.T) Block {
		entry := rapid.Custom(func(t *rapid.T) string {
			key := rapid.StringMatching(`[A-Za-z_][A-Za-z0-9_]{0,8}`).Draw(t, "key")
			value := rapid.SliceOfN(rapid.Byte().Filter(func(b byte) bool { return b != 0 }), 0, 40).Draw(t, "value")
			return key + "=" + string(value)
		})
		return Block{
			Dir:  "/" + rapid.StringMatching(`[^\x00]{0,30}`).Draw(t, "dir"),
			Keep: rapid.SliceOf(rapid.StringMatching(`[A-Z]{1,6}`)).Draw(t, "keep"),
			Run:  rapid.SampledFrom([]string{"", "/home/u/.kennel-remote/run/s-1"}).Draw(t, "run"),
			Stub: rapid.SampledFrom([]string{"", "/stub"}).Draw(t, "stub"),
			Env:  rapid.SliceOf(entry).Draw(t, "env"),
		}
	})
}

func equal(a, b Block) bool {
	return a.Dir == b.Dir && slices.Equal(a.Keep, b.Keep) && a.Run == b.Run && a.Stub == b.Stub && slices.Equal(a.Env, b.Env)
}

func TestBlockRoundTrips(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := blockGen().Draw(t, "block")
		if len(b.Keep) == 0 {
			b.Keep = nil
		}
		if len(b.Env) == 0 {
			b.Env = nil
		}
		tail := rapid.SliceOf(rapid.Byte()).Draw(t, "tail")
		p, err := b.Encode()
		if err != nil {
			t.Fatalf("encode %+v: %v", b, err)
		}
		got, rest, err := decode(append(p, tail...))
		if err != nil || !equal(got, b) || !bytes.Equal(rest, tail) {
			t.Fatalf("round trip: %+v %q %v, want %+v %q", got, rest, err, b, tail)
		}
	})
}

func TestBlockRefusesWhatTheProgramCannotRead(t *testing.T) {
	for _, b := range []Block{
		{},
		{Dir: "/a\x00b"},
		{Dir: "/", Keep: []string{""}},
		{Dir: "/", Keep: []string{"A,B"}},
		{Dir: "/", Keep: []string{"A=B"}},
		{Dir: "/", Run: "/r\x00"},
		{Dir: "/", Env: []string{"NOEQUALS"}},
		{Dir: "/", Env: []string{"=value"}},
		{Dir: "/", Env: []string{"A=b\x00c"}},
		{Dir: "/", Env: []string{"A=" + strings.Repeat("x", MaxBlock)}},
	} {
		if _, err := b.Encode(); !errors.Is(err, ErrBadBlock) || !errdefs.IsInvalidArgument(err) {
			t.Errorf("Encode(%.60q): %v, want ErrBadBlock, an invalid argument", b, err)
		}
	}
}

// FuzzDecode: decoding any bytes never panics, and what decodes and encodes encodes
// back to the same bytes.
func FuzzDecode(f *testing.F) {
	good, _ := Block{Dir: "/work", Keep: []string{"PATH", "HOME"}, Run: "/r", Env: []string{"A=b", "E="}}.Encode()
	f.Add(good)
	f.Add([]byte{0, 0, 0, 0})
	f.Add(append([]byte{0, 0, 0, 19}, "kennel-start/1\x00/\x00\x00\x00\x00"...))
	f.Fuzz(func(t *testing.T, p []byte) {
		b, rest, err := decode(p)
		if err != nil {
			return
		}
		again, err := b.Encode()
		if err != nil {
			return // read, but not a block the transports send (an empty dir or kept name)
		}
		if !bytes.Equal(append(again, rest...), p) {
			t.Fatalf("re-encoded %q, want %q", again, p)
		}
	})
}

// run runs Program(next) with stdin and the interpreter environment env.
func run(t testing.TB, python, next string, env []string, stdin []byte) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(python, "-I", "-S", "-c", Program(next))
	cmd.Env = env
	cmd.Stdin = bytes.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return out.String(), errb.String(), code
}

func lengthPrefixed(body string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// A block the program cannot use ends the kernel before any byte on stdout, with the
// documented status: 2 a bad block (or run directory), 3 no stub, 4 no directory.
func TestProgramRefusesBadBlocks(t *testing.T) {
	python := testneed.Python(t)
	tmp := t.TempDir()
	if err := os.Mkdir(filepath.Join(tmp, "taken"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		stdin []byte
		code  int
	}{
		{"empty", nil, 2},
		{"short length", []byte{0, 0}, 2},
		{"cut", lengthPrefixed("kennel-start/1\x00/\x00\x00\x00\x00")[:10], 2},
		{"over the limit", binary.BigEndian.AppendUint32(nil, MaxBlock+1), 2},
		{"no final NUL", lengthPrefixed("kennel-start/1\x00/\x00\x00\x00"), 2},
		{"another magic", lengthPrefixed("kennel-start/2\x00/\x00\x00\x00\x00"), 2},
		{"too few fields", lengthPrefixed("kennel-start/1\x00/\x00\x00\x00"), 2},
		{"entry without =", lengthPrefixed("kennel-start/1\x00/\x00\x00\x00\x00NOEQUALS\x00"), 2},
		{"entry with empty key", lengthPrefixed("kennel-start/1\x00/\x00\x00\x00\x00=v\x00"), 2},
		{"run directory taken", lengthPrefixed("kennel-start/1\x00/\x00\x00" + tmp + "/taken\x00\x00"), 2},
		{"no stub", lengthPrefixed("kennel-start/1\x00/\x00\x00\x00" + tmp + "\x00"), 3},
		{"missing dir", lengthPrefixed("kennel-start/1\x00/nonexistent/kennel\x00\x00\x00\x00"), 4},
		{"dir a file", lengthPrefixed("kennel-start/1\x00/etc/hostname\x00\x00\x00\x00"), 4},
	} {
		out, stderr, code := run(t, python, "print('ran')", nil, c.stdin)
		if code != c.code || out != "" || !strings.Contains(stderr, "kennel start:") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit %d, no stdout, a message", c.name, code, out, stderr, c.code)
		}
	}
}

// The program makes the environment exactly the kept variables that were set, then the
// block's entries (bytes as sent: values that are not UTF-8, '=' and newlines
// included), enters the directory, records the pid and its start time in the run
// directory, and hands the stub's directory on as sys.argv[1].
func TestProgramAppliesTheBlock(t *testing.T) {
	python := testneed.Python(t)
	dir := t.TempDir()
	stub := t.TempDir()
	if err := os.Mkdir(filepath.Join(stub, "kennel"), 0o700); err != nil {
		t.Fatal(err)
	}
	const show = `
import os, sys, json
sys.stdout.write(json.dumps({"pid": os.getpid(), "argv": sys.argv, "cwd": os.getcwd(),
    "env": {k.hex(): v.hex() for k, v in os.environb.items()}}))`
	n := 0
	rapid.Check(t, func(rt *rapid.T) {
		b := blockGen().Draw(rt, "block")
		b.Dir, b.Stub, b.Run = dir, rapid.SampledFrom([]string{"", stub}).Draw(rt, "stub"), ""
		if rapid.Bool().Draw(rt, "run") {
			n++
			b.Run = filepath.Join(dir, "runs", strconv.Itoa(n))
		}
		initial := []string{"KEEP=kept", "DROP=dropped", "PATH=/initial"}
		b.Keep = append(b.Keep, "KEEP", "UNSET")
		p, err := b.Encode()
		if err != nil {
			rt.Fatal(err)
		}
		out, stderr, code := run(t, python, show, initial, p)
		if code != 0 {
			rt.Fatalf("exit %d: %s", code, stderr)
		}
		var got struct {
			PID  int               `json:"pid"`
			Argv []string          `json:"argv"`
			Cwd  string            `json:"cwd"`
			Env  map[string]string `json:"env"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			rt.Fatalf("%q: %v", out, err)
		}
		want := map[string]string{}
		for k, v := range envMap(initial) {
			if slices.Contains(b.Keep, k) {
				want[hexOf(k)] = hexOf(v)
			}
		}
		for k, v := range envMap(b.Env) {
			want[hexOf(k)] = hexOf(v)
		}
		if got.Cwd != dir {
			rt.Errorf("cwd %q, want %q", got.Cwd, dir)
		}
		if wantArgv := []string{"-c"}; b.Stub != "" && !slices.Equal(got.Argv, append(wantArgv, stub)) ||
			b.Stub == "" && !slices.Equal(got.Argv, wantArgv) {
			rt.Errorf("argv %q with stub %q", got.Argv, b.Stub)
		}
		if len(got.Env) != len(want) {
			rt.Fatalf("environment %v, want %v", got.Env, want)
		}
		for k, v := range want {
			if got.Env[k] != v {
				rt.Fatalf("environment %v, want %v", got.Env, want)
			}
		}
		if b.Run != "" {
			rec, err := os.ReadFile(filepath.Join(b.Run, "pid"))
			f := strings.Fields(string(rec))
			ns, _ := os.Readlink("/proc/self/ns/pid")
			if err != nil || len(f) != 3 || f[0] != strconv.Itoa(got.PID) || f[1] == "-" || f[2] != ns {
				rt.Fatalf("pid record %q, %v; want %d, a start time and the pid namespace %s", rec, err, got.PID, ns)
			}
			if fi, err := os.Stat(b.Run); err != nil || fi.Mode().Perm() != 0o700 {
				rt.Fatalf("run directory: %v, %v", fi, err)
			}
		}
	})
}

func hexOf(s string) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, digits[s[i]>>4], digits[s[i]&15])
	}
	return string(out)
}

// decode reads a block as the program does and returns what follows it.
func decode(p []byte) (Block, []byte, error) {
	if len(p) < 4 {
		return Block{}, nil, fmt.Errorf("short length: %w", ErrBadBlock)
	}
	n := binary.BigEndian.Uint32(p)
	if n > MaxBlock || int(n) > len(p)-4 {
		return Block{}, nil, fmt.Errorf("length %d: %w", n, ErrBadBlock)
	}
	body, rest := p[4:4+n], p[4+n:]
	if len(body) == 0 || body[len(body)-1] != 0 {
		return Block{}, nil, fmt.Errorf("no final NUL: %w", ErrBadBlock)
	}
	f := strings.Split(string(body[:len(body)-1]), "\x00")
	if len(f) < 5 || f[0] != magic {
		return Block{}, nil, fmt.Errorf("no %s magic and fields: %w", magic, ErrBadBlock)
	}
	for i, kv := range f[5:] {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return Block{}, nil, fmt.Errorf("env entry %d: %w", i, ErrBadBlock)
		}
	}
	b := Block{Dir: f[1], Run: f[3], Stub: f[4], Env: f[5:]}
	if f[2] != "" {
		b.Keep = strings.Split(f[2], ",")
	}
	if len(b.Env) == 0 {
		b.Env = nil
	}
	return b, rest, nil
}
