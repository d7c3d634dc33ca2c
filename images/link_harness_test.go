package images

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testproc"
)

// The test side of protocol 2 (docs/protocol.md, "Protocol 2"): a detached stub in a run
// directory of its own, and raw connections to its socket that play the controller. The
// envelope handling here is deliberately the test's own, written from the spec.

// detached is a real stub running detached.
type detached struct {
	t     testing.TB
	cmd   *exec.Cmd
	run   string // the run directory
	id    string // the kernel id: the run directory's base name
	token string
	out   *lockedBuffer // the stub's stdout and stderr until it points them at kernel.log
	done  chan struct{}
	exit  error
}

type detachedOpts struct {
	env       []string
	tokenLine *string     // what fd 0 carries instead of the token and a newline
	mode      os.FileMode // of the run directory; 0 is 0700
	run       string      // the run directory to use (made by the caller); "" makes one
	noSocket  bool        // do not wait for the socket
	bootstrap bool        // run through Bundle.BootstrapArgv, the payload on fd 0 first
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func startDetached(t testing.TB, opts detachedOpts) *detached {
	t.Helper()
	python := needPython(t)
	b, dir := stubDir(t)
	run := opts.run
	if run == "" {
		run = filepath.Join(t.TempDir(), "k-"+randomHex(4))
		if err := os.Mkdir(run, 0o700); err != nil {
			t.Fatal(err)
		}
		if opts.mode != 0 {
			if err := os.Chmod(run, opts.mode); err != nil {
				t.Fatal(err)
			}
		}
	}
	k := &detached{t: t, run: run, id: filepath.Base(run), token: randomHex(32), out: &lockedBuffer{}, done: make(chan struct{})}
	line := k.token + "\n"
	if opts.tokenLine != nil {
		line = *opts.tokenLine
	}
	argv := KernelArgv(python, dir)
	var stdin []byte
	if opts.bootstrap {
		argv = b.BootstrapArgv(python)
		payload, err := b.BootstrapPayload()
		if err != nil {
			t.Fatal(err)
		}
		stdin = payload
	}
	stdin = append(stdin, line...)
	k.cmd = exec.Command(argv[0], argv[1:]...)
	k.cmd.Env = append(append(append(os.Environ(), KernelEnv(b)...), EnvRun+"="+run), opts.env...)
	k.cmd.Stdin = bytes.NewReader(stdin)
	k.cmd.Stdout = k.out
	k.cmd.Stderr = k.out
	if err := k.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		k.exit = k.cmd.Wait()
		close(k.done)
	}()
	t.Cleanup(k.stop)
	if !opts.noSocket {
		eventually(t, "kernel.sock accepts", func() bool {
			if k.exited() {
				t.Fatalf("detached kernel exited (%v) before serving; output:\n%s", k.exit, k.out.String())
			}
			c, err := net.Dial("unix", k.sockPath())
			if err == nil {
				c.Close() // an unanswered connection: the kernel logs it and goes on
			}
			return err == nil
		})
	}
	return k
}

// sockPath is a path to kernel.sock short enough for sun_path: through /proc/self/fd
// when the run directory's own path is too long.
func (k *detached) sockPath() string {
	p := filepath.Join(k.run, "kernel.sock")
	if len(p) < 100 {
		return p
	}
	f, err := os.Open(k.run)
	if err != nil {
		return p
	}
	// Kept open for the test's life: the path below names it.
	k.t.Cleanup(func() { f.Close() })
	return fmt.Sprintf("/proc/self/fd/%d/kernel.sock", f.Fd())
}

func (k *detached) pid() int { return k.cmd.Process.Pid }

func (k *detached) exited() bool {
	select {
	case <-k.done:
		return true
	default:
		return false
	}
}

// stop ends the kernel if the test has not: its session's group is KILLed.
func (k *detached) stop() {
	if !k.exited() {
		testproc.KillGroup(k.pid(), syscall.SIGKILL)
		select {
		case <-k.done:
		case <-time.After(wait):
			k.t.Errorf("detached kernel %d did not end after SIGKILL", k.pid())
		}
	}
	if k.t.Failed() {
		k.t.Logf("kernel output:\n%s\nkernel.log:\n%s", k.out.String(), k.log())
	}
}

// log returns kernel.log ("" when there is none).
func (k *detached) log() string {
	b, _ := os.ReadFile(filepath.Join(k.run, "kernel.log"))
	return string(b)
}

// waitExit waits for the kernel to end and returns its exit code and how long it took.
func (k *detached) waitExit(bound time.Duration) (int, time.Duration) {
	k.t.Helper()
	start := time.Now()
	select {
	case <-k.done:
	case <-time.After(bound):
		k.t.Fatalf("detached kernel did not exit within %v", bound)
	}
	took := time.Since(start)
	var ee *exec.ExitError
	if errors.As(k.exit, &ee) {
		return ee.ExitCode(), took
	}
	if k.exit != nil {
		k.t.Fatalf("wait: %v", k.exit)
	}
	return 0, took
}

// lconn is one connection to a detached kernel, played as the controller.
type lconn struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

func (k *detached) dial() *lconn {
	k.t.Helper()
	c, err := net.Dial("unix", k.sockPath())
	if err != nil {
		k.t.Fatalf("dial: %v", err)
	}
	lc := &lconn{t: k.t, c: c, r: bufio.NewReaderSize(c, 1<<20)}
	k.t.Cleanup(func() { c.Close() })
	return lc
}

// attachLine is the controller's first line.
func attachLine(kernel, token string, ack uint64, grace float64) string {
	b, _ := json.Marshal(map[string]any{"attach": map[string]any{"kernel": kernel, "token": token, "ack": ack, "grace": grace}})
	return string(b) + "\n"
}

// attach dials and attaches with ack and grace; it fails the test unless the answer is
// a hello, which it returns (numbers as json.Number).
func (k *detached) attach(ack uint64, grace float64) (*lconn, map[string]any) {
	k.t.Helper()
	c := k.dial()
	c.write(attachLine(k.id, k.token, ack, grace))
	line, err := c.line()
	if err != nil {
		k.t.Fatalf("no answer to the attach: %v", err)
	}
	var v map[string]map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || v["hello"] == nil || len(v) != 1 {
		k.t.Fatalf("answer to the attach is no hello: %q (%v)", line, err)
	}
	return c, v["hello"]
}

func (c *lconn) write(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, s); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// line reads one line (within wait).
func (c *lconn) line() ([]byte, error) {
	c.c.SetReadDeadline(time.Now().Add(wait))
	return c.r.ReadBytes('\n')
}

// closed reports whether the kernel closed the connection: EOF (or a reset) with no line
// before it; a line that comes instead fails the test.
func (c *lconn) closed() bool {
	c.t.Helper()
	line, err := c.line()
	if len(line) > 0 {
		c.t.Fatalf("a line where the end of the connection was expected: %q", line)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return err != nil
}

// send writes the envelope of host frame f (a hostFrame line) with seq and ack.
func (c *lconn) send(seq, ack uint64, f []byte) {
	c.t.Helper()
	c.write(fmt.Sprintf(`{"seq":%d,"ack":%d,"frame":%s}`+"\n", seq, ack, bytes.TrimSuffix(f, []byte("\n"))))
}

// envelope is one line the kernel sent after its hello.
type envelope struct {
	Seq   uint64 // 0 for a bare ack
	Ack   uint64
	Frame frame // the inner frame (Raw is its bytes with a newline added)
}

// decodeEnvelope reads the compact forms the kernel writes, {"seq":n,"ack":m,"frame":F}
// and {"ack":m}, and checks F by the protocol 1 rules (parseFrame).
func decodeEnvelope(line []byte) (envelope, error) {
	if !json.Valid(line) {
		return envelope{}, fmt.Errorf("envelope is not JSON: %q", excerpt(line))
	}
	body, ok := bytes.CutSuffix(line, []byte("}\n"))
	if !ok {
		return envelope{}, fmt.Errorf("envelope does not end with }\\n: %q", excerpt(line))
	}
	if rest, ok := bytes.CutPrefix(body, []byte(`{"ack":`)); ok {
		ack, err := strconv.ParseUint(string(rest), 10, 53)
		if err != nil {
			return envelope{}, fmt.Errorf("bare ack %q: %v", line, err)
		}
		return envelope{Ack: ack}, nil
	}
	rest, ok := bytes.CutPrefix(body, []byte(`{"seq":`))
	if !ok {
		return envelope{}, fmt.Errorf("not an envelope: %q", excerpt(line))
	}
	seqText, rest, ok := bytes.Cut(rest, []byte(`,"ack":`))
	if !ok {
		return envelope{}, fmt.Errorf("no ack after seq: %q", excerpt(line))
	}
	ackText, inner, ok := bytes.Cut(rest, []byte(`,"frame":`))
	if !ok {
		return envelope{}, fmt.Errorf("no frame after ack: %q", excerpt(line))
	}
	seq, err1 := strconv.ParseUint(string(seqText), 10, 53)
	ack, err2 := strconv.ParseUint(string(ackText), 10, 53)
	if err1 != nil || err2 != nil || seq == 0 {
		return envelope{}, fmt.Errorf("seq %q or ack %q: %q", seqText, ackText, excerpt(line))
	}
	f := parseFrame(append(append([]byte(nil), inner...), '\n'))
	if f.Err != nil {
		return envelope{}, fmt.Errorf("inner frame: %v", f.Err)
	}
	return envelope{Seq: seq, Ack: ack, Frame: f}, nil
}

// next reads the next envelope; a bad one, or the connection's end, fails the test.
func (c *lconn) next() envelope {
	c.t.Helper()
	line, err := c.line()
	if err != nil {
		c.t.Fatalf("no envelope from the kernel: %v (got %q)", err, line)
	}
	e, err := decodeEnvelope(line)
	if err != nil {
		c.t.Fatal(err)
	}
	return e
}

// stream is what the controller side has applied from the kernel, across connections:
// it checks the seqs of frames it takes rise without gaps.
type stream struct {
	t      testing.TB
	last   uint64  // the highest kernel seq applied
	frames []frame // applied, in order
	acked  uint64  // the highest ack of the controller's frames seen
}

// take applies envelope e: a frame must be the next seq (the outbox dropped nothing in
// these tests).
func (s *stream) take(e envelope) {
	s.t.Helper()
	if e.Ack > s.acked {
		s.acked = e.Ack
	}
	if e.Seq == 0 {
		return
	}
	if e.Seq != s.last+1 {
		s.t.Fatalf("kernel seq %d after %d (frame %s)", e.Seq, s.last, e.Frame)
	}
	s.last = e.Seq
	s.frames = append(s.frames, e.Frame)
}

// until reads envelopes from c into s until pred holds for a frame; it returns it.
func (s *stream) until(c *lconn, pred func(frame) bool) frame {
	s.t.Helper()
	for {
		e := c.next()
		s.take(e)
		if e.Seq != 0 && pred(e.Frame) {
			return e.Frame
		}
	}
}

// untilAck reads envelopes from c into s until the kernel has acknowledged seq.
func (s *stream) untilAck(c *lconn, seq uint64) {
	s.t.Helper()
	for s.acked < seq {
		s.take(c.next())
	}
}

// count is how many applied frames pred holds for.
func (s *stream) count(pred func(frame) bool) int {
	n := 0
	for _, f := range s.frames {
		if pred(f) {
			n++
		}
	}
	return n
}

// hnum reads an integer field of a hello.
func hnum(t testing.TB, h map[string]any, key string) int {
	t.Helper()
	if _, ok := h[key]; !ok {
		t.Fatalf("hello has no %q: %v", key, h)
	}
	return num(t, h[key])
}

// procStart is field 22 of /proc/<pid>/stat: the start time in clock ticks since boot.
func procStart(t testing.TB, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	n, err := strconv.Atoi(fields[19])
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// alive reports whether pid exists (a zombie counts).
func alive(pid int) bool {
	return testproc.Kill(pid, 0) == nil
}
