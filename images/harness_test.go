package images

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testproc"
)

// wait bounds every wait for the kernel in tests. It is a failure bound, not a timing
// assertion: a healthy kernel answers in milliseconds.
const wait = 20 * time.Second

var testCache struct {
	once sync.Once
	dir  string
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testCache.dir != "" {
		os.RemoveAll(testCache.dir)
	}
	os.Exit(code)
}

// resolvedPython is the interpreter the tests run the stub with: python3, or the one
// KENNEL_TEST_PYTHON names (to run the suite on another Python version).
var resolvedPython = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return ResolvePython(ctx, os.Getenv("KENNEL_TEST_PYTHON"))
})

// needPython returns the real python3 interpreter, or skips (fails under CI).
func needPython(t testing.TB) string {
	t.Helper()
	p, err := resolvedPython()
	if err != nil {
		testneed.Missing(t, "python3", err)
	}
	return p
}

// stubDir unpacks the embedded stub once per test binary.
func stubDir(t testing.TB) (*Bundle, string) {
	t.Helper()
	b, err := Stub()
	if err != nil {
		t.Fatal(err)
	}
	testCache.once.Do(func() {
		dir, err := os.MkdirTemp("", "kennel-images-test-")
		if err == nil {
			testCache.dir = dir
		}
	})
	if testCache.dir == "" {
		t.Fatal("no temp cache dir")
	}
	dir, err := b.Unpack(testCache.dir)
	if err != nil {
		t.Fatal(err)
	}
	return b, dir
}

// frame is one frame the kernel wrote.
type frame struct {
	Event string
	ID    string
	Raw   []byte
	M     map[string]any
	Err   error // set when the line broke a protocol rule
}

func (f frame) str(key string) string {
	s, _ := f.M[key].(string)
	return s
}

func (f frame) String() string {
	if len(f.Raw) > 300 {
		return string(f.Raw[:300]) + "..."
	}
	return string(bytes.TrimSpace(f.Raw))
}

// checkHead checks the protocol's head rule: the frame is one JSON object whose first
// key is "event" and second is "id", both strings.
func checkHead(line []byte) (event, id string, err error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return "", "", fmt.Errorf("frame does not start with an object: %q", excerpt(line))
	}
	for i, want := range []string{"event", "id"} {
		tok, err = dec.Token()
		if err != nil || tok != want {
			return "", "", fmt.Errorf("frame key %d is %v, want %q: %q", i, tok, want, excerpt(line))
		}
		tok, err = dec.Token()
		s, ok := tok.(string)
		if err != nil || !ok {
			return "", "", fmt.Errorf("frame %q is not a string: %q", want, excerpt(line))
		}
		if i == 0 {
			event = s
		} else {
			id = s
		}
	}
	return event, id, nil
}

func parseFrame(line []byte) frame {
	f := frame{Raw: append([]byte(nil), line...)}
	if !bytes.HasSuffix(line, []byte("\n")) {
		f.Err = fmt.Errorf("frame without newline: %q", excerpt(line))
		return f
	}
	f.Event, f.ID, f.Err = checkHead(line)
	if f.Err != nil {
		return f
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&f.M); err != nil {
		f.Err = fmt.Errorf("frame is not JSON: %v", err)
		return f
	}
	if dec.More() {
		f.Err = fmt.Errorf("more than one value in a frame line: %q", excerpt(line))
	}
	return f
}

// kernel is a real stub process the test talks to as the host.
type kernel struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	frames chan frame
	stderr *lockedBuffer
	done   chan struct{}
	exit   error
	hello  frame
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type kernelOpts struct {
	env     []string // extra environment entries
	dir     string   // working directory
	argv    []string // instead of KernelArgv
	payload []byte   // written to stdin first (bootstrap)
	noHello bool     // do not wait for the hello
}

func startKernel(t testing.TB, opts kernelOpts) *kernel {
	t.Helper()
	python := needPython(t)
	b, dir := stubDir(t)
	argv := opts.argv
	if argv == nil {
		argv = KernelArgv(python, dir)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), KernelEnv(b)...), opts.env...)
	cmd.Dir = opts.dir
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	k := &kernel{t: t, cmd: cmd, stdin: stdin, frames: make(chan frame, 4096), stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = k.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		r := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				k.frames <- parseFrame(line)
			}
			if err != nil {
				break
			}
		}
		k.exit = cmd.Wait()
		close(k.frames)
		close(k.done)
	}()
	t.Cleanup(k.stop)
	if opts.payload != nil {
		if _, err := stdin.Write(opts.payload); err != nil {
			t.Fatalf("write payload: %v", err)
		}
	}
	if !opts.noHello {
		k.hello = k.next()
		if k.hello.Event != "hello" {
			t.Fatalf("first frame is %s, want hello", k.hello)
		}
	}
	return k
}

// stop ends the kernel: stdin closed, then the group killed if it lingers.
func (k *kernel) stop() {
	k.stdin.Close()
	select {
	case <-k.done:
	case <-time.After(5 * time.Second):
		testproc.KillGroup(k.cmd.Process.Pid, syscall.SIGKILL)
		k.cmd.Process.Kill()
		<-k.done
	}
	if k.t.Failed() {
		k.t.Logf("kernel stderr:\n%s", k.stderr.String())
	}
}

// send writes one host frame: "type" and "id" first, then kv pairs in order.
func (k *kernel) send(typ, id string, kv ...any) {
	k.t.Helper()
	if _, err := k.stdin.Write(hostFrame(typ, id, kv...)); err != nil {
		k.t.Fatalf("send %s %s: %v", typ, id, err)
	}
}

func hostFrame(typ, id string, kv ...any) []byte {
	var b bytes.Buffer
	t, _ := json.Marshal(typ)
	i, _ := json.Marshal(id)
	fmt.Fprintf(&b, `{"type":%s,"id":%s`, t, i)
	for n := 0; n+1 < len(kv); n += 2 {
		key, _ := json.Marshal(kv[n])
		val, err := json.Marshal(kv[n+1])
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(&b, ",%s:%s", key, val)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// next returns the next frame; a frame breaking the protocol fails the test.
func (k *kernel) next() frame {
	k.t.Helper()
	select {
	case f, ok := <-k.frames:
		if !ok {
			k.t.Fatalf("kernel ended (%v) while a frame was expected; stderr:\n%s", k.exit, k.stderr.String())
		}
		if f.Err != nil {
			k.t.Fatalf("bad frame: %v", f.Err)
		}
		return f
	case <-time.After(wait):
		k.t.Fatalf("no frame from the kernel within %v", wait)
	}
	return frame{}
}

// until reads frames until pred holds for one; it returns all read, the last matching.
func (k *kernel) until(pred func(frame) bool) []frame {
	k.t.Helper()
	var got []frame
	for {
		f := k.next()
		got = append(got, f)
		if pred(f) {
			return got
		}
	}
}

func isDone(id string) func(frame) bool {
	return func(f frame) bool { return f.Event == "done" && f.ID == id }
}

// execute runs a cell and returns the frames before its done, and the done.
func (k *kernel) execute(id, code string) ([]frame, frame) {
	k.t.Helper()
	k.send("execute", id, "code", code)
	got := k.until(isDone(id))
	return got[:len(got)-1], got[len(got)-1]
}

// result runs a cell that must succeed and returns its result (or "<null>").
func (k *kernel) result(id, code string) string {
	k.t.Helper()
	_, done := k.execute(id, code)
	if done.str("status") != "ok" {
		k.t.Fatalf("cell %s %q: %s", id, code, done)
	}
	if done.M["result"] == nil {
		return "<null>"
	}
	return done.str("result")
}

// streamText joins the text of the stream frames named name owned by cell id.
func streamText(frames []frame, id, name string) string {
	var b strings.Builder
	for _, f := range frames {
		if f.Event == "stream" && f.ID == id && f.str("name") == name {
			b.WriteString(f.str("text"))
		}
	}
	return b.String()
}

// waitExit waits for the kernel process to end and returns its exit code.
func (k *kernel) waitExit() int {
	k.t.Helper()
	timeout := time.After(wait)
drain:
	for {
		select {
		case f, ok := <-k.frames:
			if !ok {
				break drain
			}
			if f.Err != nil {
				k.t.Errorf("bad frame: %v", f.Err)
			}
		case <-timeout:
			k.t.Fatalf("kernel did not exit within %v", wait)
		}
	}
	<-k.done
	var ee *exec.ExitError
	if errors.As(k.exit, &ee) {
		return ee.ExitCode()
	}
	if k.exit != nil {
		k.t.Fatalf("wait: %v", k.exit)
	}
	return 0
}

// groupGone reports whether process group pgid has no members left.
func groupGone(pgid int) bool {
	return errors.Is(testproc.KillGroup(pgid, 0), syscall.ESRCH)
}

// eventually polls cond until it holds or wait passes.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, wait)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func num(t testing.TB, v any) int {
	t.Helper()
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("%v is not a number", v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return int(i)
}
