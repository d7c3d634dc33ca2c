package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/controller"
	"github.com/kennel-dev/kennel/controller/gate"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/internal/fakekernel"
	"github.com/kennel-dev/kennel/internal/reaper"
	"github.com/kennel-dev/kennel/internal/testneed"
	"github.com/kennel-dev/kennel/internal/testproc"
	"github.com/kennel-dev/kennel/transports/local"
)

func TestMain(m *testing.M) {
	if reaper.Main() || fakekernel.Main() {
		return
	}
	os.Exit(m.Run())
}

// sharedTransport is one local transport for the package's tests, so the interpreter is
// resolved once.
var sharedTransport = sync.OnceValue(func() *local.Transport { return local.New(local.Options{}) })

// captureSink records a cell's output.
type captureSink struct {
	mu       sync.Mutex
	out, err strings.Builder
	displays []json.RawMessage
	onStream func(name, text string)
}

func (c *captureSink) Stream(name, text string) {
	c.mu.Lock()
	if name == "stderr" {
		c.err.WriteString(text)
	} else {
		c.out.WriteString(text)
	}
	f := c.onStream
	c.mu.Unlock()
	if f != nil {
		f(name, text)
	}
}

func (c *captureSink) Display(data json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.displays = append(c.displays, append(json.RawMessage(nil), data...))
}

func (c *captureSink) stdout() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

// startSession starts a local session in a temporary directory, closed at cleanup.
func startSession(t *testing.T, opts controller.Options) *controller.Session {
	t.Helper()
	if opts.Transport == nil {
		opts.Transport = sharedTransport()
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	b, err := images.Stub()
	if err != nil {
		t.Fatal(err)
	}
	opts.Bundle = b.Hash()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := controller.Start(ctx, opts)
	if err != nil {
		if errors.Is(err, images.ErrNoPython) {
			testneed.Missing(t, "python3", err)
		}
		t.Fatalf("start session: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close session: %v", err)
		}
	})
	return s
}

func execute(t *testing.T, s *controller.Session, code string) (*controller.CellResult, *captureSink) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sink := &captureSink{}
	res, err := s.Execute(ctx, code, sink)
	if err != nil {
		t.Fatalf("execute %q: %v", code, err)
	}
	return res, sink
}

func TestCellsShareOneNamespaceAndReturnTheFinalExpression(t *testing.T) {
	s := startSession(t, controller.Options{})
	res, _ := execute(t, s, "x = 6*7")
	if res.Status != "ok" || res.Result != nil {
		t.Fatalf("assignment cell: %+v", res)
	}
	res, sink := execute(t, s, "print(x)")
	if res.Status != "ok" || sink.stdout() != "42\n" {
		t.Fatalf("print cell: %+v, stdout %q", res, sink.stdout())
	}
	res, _ = execute(t, s, "y = x + 1\ny * 2")
	if res.Result == nil || *res.Result != "86" {
		t.Fatalf("final expression: %+v", res)
	}
}

func TestAnExceptionEndsTheCellWithItsTraceback(t *testing.T) {
	s := startSession(t, controller.Options{})
	res, _ := execute(t, s, "def f():\n    return 1/0\nf()")
	if res.Status != "error" || res.Error == nil {
		t.Fatalf("want error, got %+v", res)
	}
	if res.Error.EName != "ZeroDivisionError" || !strings.Contains(res.Error.Traceback, "f()") {
		t.Fatalf("error %+v", res.Error)
	}
	res, _ = execute(t, s, "'still here'")
	if res.Status != "ok" {
		t.Fatalf("session did not go on: %+v", res)
	}
}

func TestCancellingTheContextInterruptsTheCellAndKeepsTheNamespace(t *testing.T) {
	s := startSession(t, controller.Options{})
	execute(t, s, "kept = 'yes'")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &captureSink{onStream: func(_, text string) {
		if strings.Contains(text, "looping") {
			cancel()
		}
	}}
	res, err := s.Execute(ctx, "import time\nprint('looping', flush=True)\nwhile True: time.sleep(0.01)", sink)
	if err != nil {
		t.Fatalf("interrupted cell: %v", err)
	}
	if res.Status != "interrupted" {
		t.Fatalf("want interrupted, got %+v", res)
	}
	res, _ = execute(t, s, "kept")
	if res.Result == nil || *res.Result != "'yes'" {
		t.Fatalf("namespace lost: %+v", res)
	}
}

// echoHandler serves "test.echo" (the args back), "test.slow" (waits for release) and
// "test.fail" (an error with a code).
type echoHandler struct {
	release chan struct{}
}

type codeErr string

func (c codeErr) Error() string { return "refused: " + string(c) }
func (c codeErr) Code() string  { return string(c) }

func (h *echoHandler) Serves(typ string) bool {
	return typ == "test.echo" || typ == "test.slow" || typ == "test.fail"
}

func (h *echoHandler) Serve(ctx context.Context, typ string, args json.RawMessage) (any, error) {
	switch typ {
	case "test.slow":
		select {
		case <-h.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return "slow", nil
	case "test.fail":
		return nil, codeErr("not_found")
	}
	return json.RawMessage(args), nil
}

func TestHostRequestsAreServedAndRefused(t *testing.T) {
	s := startSession(t, controller.Options{Handler: &echoHandler{}})
	res, _ := execute(t, s, "import kennel\nkennel.host_request('test.echo', a=1, b='two')")
	if res.Status != "ok" || res.Result == nil || *res.Result != "{'a': 1, 'b': 'two'}" {
		t.Fatalf("echo: %+v %v", res, res.Error)
	}
	for _, tc := range []struct{ code, want string }{
		{"kennel.host_request('test.nope')", "unserved"},
		{"kennel.host_request('test.fail')", "not_found"},
	} {
		res, _ := execute(t, s, "try:\n    "+tc.code+"\nexcept kennel.HostError as e:\n    c = e.code\nc")
		if res.Result == nil || *res.Result != fmt.Sprintf("'%s'", tc.want) {
			t.Errorf("%s: got %+v", tc.code, res)
		}
	}
}

func TestALongHostRequestDoesNotHoldBackAShortOne(t *testing.T) {
	h := &echoHandler{release: make(chan struct{})}
	s := startSession(t, controller.Options{Handler: h})
	// The slow request is in flight while the short one is asked; the short one's reply
	// must come first, or the cell would wait forever (the slow one is released only after).
	code := `
import kennel, threading
order = []
t = threading.Thread(target=lambda: order.append(kennel.host_request('test.slow')))
t.start()
import time; time.sleep(0.2)
order.append(kennel.host_request('test.echo', n=1))
print('short done', flush=True)
t.join()
order`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sink := &captureSink{onStream: func(_, text string) {
		if strings.Contains(text, "short done") {
			close(h.release)
		}
	}}
	res, err := s.Execute(ctx, code, sink)
	if err != nil {
		t.Fatal(err)
	}
	if res.Result == nil || *res.Result != "[{'n': 1}, 'slow']" {
		t.Fatalf("order: %+v %+v", res, res.Error)
	}
}

func TestAKernelThatWritesGarbageIsReplacedAndTheCellFailsWithAProtocolFault(t *testing.T) {
	s := startSession(t, controller.Options{})
	_, info, _ := s.Kernel()
	firstPID := info.PID
	execute(t, s, "lost = 1")
	// A hostile cell writes a non-protocol line straight onto the frame channel.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := s.Execute(ctx, `
import gc
w = [o for o in gc.get_objects() if type(o).__name__ == 'Writer' and hasattr(o, 'write')][0]
w.write(b'this is not a frame\n')
import time; time.sleep(60)`, nil)
	var fault *gate.ProtocolFault
	if !errors.As(err, &fault) {
		t.Fatalf("want a ProtocolFault, got %v", err)
	}
	if !errors.Is(err, controller.ErrKernelExited) {
		t.Fatalf("want ErrKernelExited in the chain, got %v", err)
	}
	// The next cell runs in a fresh kernel: the namespace is gone.
	res, _ := execute(t, s, "'lost' in dir()")
	if res.Result == nil || *res.Result != "False" {
		t.Fatalf("want a fresh namespace, got %+v", res)
	}
	_, info, _ = s.Kernel()
	if info.PID == firstPID {
		t.Fatalf("kernel not replaced: pid %d", info.PID)
	}
	waitGone(t, firstPID)
}

func TestA17MiBDisplayFailsItsCellAndTheSessionGoesOn(t *testing.T) {
	s := startSession(t, controller.Options{})
	res, sink := execute(t, s, "import kennel\nkennel.display({'text/plain': 'x' * (17 << 20)})")
	if res.Status != "error" || res.Error == nil || res.Error.EName != "PayloadTooLarge" {
		t.Fatalf("want PayloadTooLarge, got %+v %+v", res, res.Error)
	}
	if len(sink.displays) != 0 {
		t.Fatalf("an oversized display reached the host")
	}
	res, sink = execute(t, s, "kennel.display({'text/plain': 'small'})\n1")
	if res.Status != "ok" || len(sink.displays) != 1 {
		t.Fatalf("session did not go on: %+v, %d displays", res, len(sink.displays))
	}
}

func TestCloseEndsTheKernelAndLaterCellsFail(t *testing.T) {
	s := startSession(t, controller.Options{})
	_, info, ok := s.Kernel()
	if !ok || info.PID == 0 {
		t.Fatalf("no kernel: %+v", info)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitGone(t, info.PID)
	if _, err := s.Execute(ctx, "1", nil); !errors.Is(err, controller.ErrClosed) {
		t.Fatalf("want ErrClosed, got %v", err)
	}
}

func TestStartRefusesABadWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		want error
		text string
	}{
		{"", controller.ErrNoWorkingDir, "a session needs a working directory"},
		{filepath.Join(dir, "gone"), controller.ErrWorkingDirGone, "working directory is gone"},
		{file, controller.ErrWorkingDirNotDir, "working directory is not a directory"},
	} {
		_, err := controller.Start(context.Background(), controller.Options{Transport: sharedTransport(), Dir: tc.dir})
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("dir %q: got %v, want %v", tc.dir, err, tc.want)
		}
	}
}

// waitGone waits until pid no longer exists (or is a zombie nobody will reap).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if err := testproc.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && strings.Contains(string(b), ") Z ") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d still alive", pid)
}
