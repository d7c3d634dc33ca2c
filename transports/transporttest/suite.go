package transporttest

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/transports"
)

// Option adjusts the suite.
type Option func(*config)

type config struct {
	spec    func(t *testing.T, s *transports.Spec)
	timeout time.Duration
}

// WithSpec lets a transport adjust every Spec the suite starts a kernel from, after the
// suite filled it in: a sandbox's own Dir (which must exist and be writable there), its
// Python. It must keep the suite's SessionID and Env entries.
func WithSpec(f func(t *testing.T, s *transports.Spec)) Option {
	return func(c *config) { c.spec = f }
}

// WithTimeout bounds each wait of the suite (a frame, an end). Default 30 s.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout = d }
}

// Run runs the conformance table against the transport newTransport makes; each case
// gets a fresh Transport. Cases run one after another, never in parallel: the suite
// counts the test process's children around each one.
func Run(t *testing.T, newTransport func(t *testing.T) transports.Transport, opts ...Option) {
	cfg := config{timeout: defaultTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	b, err := images.Stub()
	if err != nil {
		t.Fatalf("embedded stub: %v", err)
	}
	s := &suite{cfg: cfg, newTransport: newTransport, bundle: b.Hash()}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := childrenOf(os.Getpid())
			t.Cleanup(func() { s.noLeftovers(t, before) })
			c.run(t, s)
		})
	}
}

type suite struct {
	cfg          config
	newTransport func(t *testing.T) transports.Transport
	bundle       string
}

// session is one kernel started by a case.
type session struct {
	tr    transports.Transport
	k     transports.Kernel
	c     *Client
	hello Frame // its first frame, checked by checkHello
}

// spec is the Spec a case starts from: a fresh directory, the test's name as session.
func (s *suite) spec(t *testing.T, env ...string) transports.Spec {
	sp := transports.Spec{
		SessionID: sessionID(t),
		Dir:       t.TempDir(),
		Env:       env,
	}
	if s.cfg.spec != nil {
		s.cfg.spec(t, &sp)
	}
	return sp
}

// start starts a kernel, registers its Kill, Wait and the end of its Stdout for the end
// of the test, and reads and checks its hello.
func (s *suite) start(t *testing.T, tr transports.Transport, sp transports.Spec) *session {
	t.Helper()
	k, c := start(t, tr, sp, s.cfg.timeout)
	return &session{tr: tr, k: k, c: c, hello: s.checkHello(t, c)}
}

// checkHello reads the first frame and checks it is the protocol's hello.
func (s *suite) checkHello(t *testing.T, c *Client) Frame {
	t.Helper()
	f, err := c.Hello()
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := f.Fields["protocol"].(float64); p != 1 {
		t.Errorf("hello protocol %v, want 1", f.Fields["protocol"])
	}
	if got := f.Str("bundle"); got != s.bundle {
		t.Errorf("hello bundle %q, want %q", got, s.bundle)
	}
	if v := f.Str("python"); len(strings.Split(v, ".")) != 3 {
		t.Errorf("hello python %q, want major.minor.micro", v)
	}
	pid, _ := f.Fields["pid"].(float64)
	pgid, _ := f.Fields["pgid"].(float64)
	if pid < 1 || pgid != pid {
		t.Errorf("hello pid %v pgid %v: want a kernel leading its own process group", pid, pgid)
	}
	return f
}

// execute runs one cell and returns its done frame and the text it wrote to stdout.
func (ss *session) execute(t *testing.T, code string) (done Frame, stdout string) {
	t.Helper()
	done, stdout, err := ss.c.Execute(code)
	if err != nil {
		t.Fatal(err)
	}
	return done, stdout
}

// value runs a cell that must succeed and returns the repr of its final expression.
func (ss *session) value(t *testing.T, code string) string {
	t.Helper()
	done, _ := ss.execute(t, code)
	if done.Str("status") != "ok" {
		t.Fatalf("cell %q: %s", code, done.Raw)
	}
	return done.Str("result")
}

// end waits for a clean EOF on the kernel's Stdout, failing the test after the client's
// timeout.
func (ss *session) end(t *testing.T) {
	t.Helper()
	if err := ss.c.End(0); err != nil {
		t.Fatal(err)
	}
}

// wait waits for the kernel's end, failing the test after the client's timeout.
func (ss *session) wait(t *testing.T) (transports.Exit, error) {
	t.Helper()
	type result struct {
		exit transports.Exit
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		e, err := ss.k.Wait()
		ch <- result{e, err}
	}()
	select {
	case r := <-ch:
		return r.exit, r.err
	case <-time.After(ss.c.timeout()):
		t.Fatalf("Wait did not return within %v", ss.c.timeout())
	}
	return transports.Exit{}, nil
}

// noLeftovers fails the test if it left a child process of the test process behind.
func (s *suite) noLeftovers(t *testing.T, before map[proc]bool) {
	deadline := time.Now().Add(s.cfg.timeout)
	for {
		var left []proc
		for p := range childrenOf(os.Getpid()) {
			if !before[p] {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		// A Wait that returned has reaped its process; allow the runtime to finish
		// reaping children of transports that wait in the background.
		if time.Now().After(deadline) {
			t.Errorf("child processes left behind: %v", left)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// boundedBuffer keeps the first limit bytes written to it; safe for concurrent use.
type boundedBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	limit   int
	dropped int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	room := b.limit - b.buf.Len()
	if room < len(p) {
		b.dropped += len(p) - max(room, 0)
		p = p[:max(room, 0)]
	}
	b.buf.Write(p)
	return n, nil
}

func (b *boundedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped > 0 {
		return fmt.Sprintf("%s\n[%d bytes dropped]", b.buf.String(), b.dropped)
	}
	return b.buf.String()
}
