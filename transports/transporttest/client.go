package transporttest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
)

// defaultTimeout bounds each wait of the suite and of a Client unless told otherwise.
const defaultTimeout = 30 * time.Second

// Client is the host side of the kernel protocol (docs/protocol.md) over one started
// kernel, for a transport's own tests: it reads the kernel's frames in a goroutine,
// checking each one's form as the suite does, and writes host frames to its stdin. The
// suite's cases use it too.
//
// Its methods return errors rather than fail a test, so a test binary acting as a
// controller in a process of its own can use it too. A Client is for one goroutine at a
// time, but for End, which may drain Stdout on another while a test waits for its end.
type Client struct {
	// Timeout bounds each wait for a frame and the wait for the end of Stdout in End when
	// that is given no bound. Zero means 30 s.
	Timeout time.Duration

	k   transports.Kernel
	rd  *reader
	seq int
}

// NewClient starts reading k's Stdout, which the Client owns from then on. The kernel's
// frames wait in a bounded queue: a test that stops reading them should call End (Start
// does, when the test ends) so the kernel is never blocked on a full pipe.
func NewClient(k transports.Kernel) *Client {
	return &Client{k: k, rd: newReader(k.Stdout())}
}

func (c *Client) timeout() time.Duration { return cmp.Or(c.Timeout, defaultTimeout) }

// Next returns the kernel's next frame. It fails when Stdout ends (saying why, when the
// stream broke the protocol) or no frame comes within Timeout.
func (c *Client) Next() (Frame, error) {
	return c.rd.next(c.timeout())
}

// Hello reads the first frame and checks it is the protocol's hello (event "hello", id
// ""). The caller checks what it says.
func (c *Client) Hello() (Frame, error) {
	f, err := c.Next()
	if err != nil {
		return Frame{}, fmt.Errorf("hello: %w", err)
	}
	if f.Event() != "hello" || f.ID() != "" {
		return Frame{}, fmt.Errorf("first frame %s: want a hello with id \"\"", f.Raw)
	}
	return f, nil
}

// Send writes an execute frame for code and returns its id, "c1", "c2", ... in order. It
// does not wait for the cell.
func (c *Client) Send(code string) (id string, err error) {
	return c.send(hostFrame{Type: "execute", Code: code}, "c")
}

// send writes f, one line, with the next id: prefix and the client's next number.
func (c *Client) send(f hostFrame, prefix string) (id string, err error) {
	c.seq++
	f.ID = prefix + strconv.Itoa(c.seq)
	b, err := json.Marshal(f)
	if err == nil {
		_, err = c.k.Stdin().Write(append(b, '\n'))
	}
	if err != nil {
		return "", fmt.Errorf("write %s: %w", f.Type, err)
	}
	return f.ID, nil
}

// Execute runs one cell and returns its done frame and the text it wrote to stdout.
// Frames of other ids read meanwhile are dropped. A cell that fails is no error here:
// the done frame says so.
func (c *Client) Execute(code string) (done Frame, stdout string, err error) {
	id, err := c.Send(code)
	if err != nil {
		return Frame{}, "", err
	}
	var out strings.Builder
	for {
		f, err := c.Next()
		if err != nil {
			return Frame{}, "", fmt.Errorf("cell %q: %w", code, err)
		}
		switch {
		case f.Event() == "stream" && f.ID() == id && f.Str("name") == "stdout":
			out.WriteString(f.Str("text"))
		case f.Event() == "done" && f.ID() == id:
			return f, out.String(), nil
		}
	}
}

// Run runs a cell that must succeed (done with status "ok") and returns what it wrote to
// stdout.
func (c *Client) Run(code string) (stdout string, err error) {
	done, out, err := c.Execute(code)
	if err != nil {
		return "", err
	}
	if done.Str("status") != "ok" {
		return "", fmt.Errorf("cell %q: %s", code, done.Raw)
	}
	return out, nil
}

// sleepersCell starts three sleep 1000 processes that try to outlive the kernel: a plain
// child, one in a new session (setsid), and a double-forked orphan. It prints their pids.
const sleepersCell = `import subprocess
_a = subprocess.Popen(["sleep", "1000"])
_b = subprocess.Popen(["sleep", "1000"], start_new_session=True)
_c = subprocess.run(["sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True).stdout.strip()
print(_a.pid, _b.pid, _c)
`

// Sleepers runs a cell that starts three sleep 1000 processes trying to outlive the
// kernel (a plain child, one in a new session, a double-forked orphan) and returns their
// pids as the kernel sees them: host pids only when the transport has HostPIDs.
func (c *Client) Sleepers() ([]int, error) {
	out, err := c.Run(sleepersCell)
	if err != nil {
		return nil, err
	}
	fields := strings.Fields(out)
	if len(fields) != 3 {
		return nil, fmt.Errorf("sleepers printed %q, want 3 pids", out)
	}
	pids := make([]int, 0, len(fields))
	for _, f := range fields {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("sleepers printed %q", out)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// Job starts a shell job running command and returns once its job_start frame came. A
// job_end before it is an error.
func (c *Client) Job(command string) error {
	id, err := c.send(hostFrame{Type: "job_run", Command: command}, "j")
	if err != nil {
		return err
	}
	for {
		f, err := c.Next()
		if err != nil {
			return fmt.Errorf("job %q: %w", command, err)
		}
		if f.ID() == id && f.Event() == "job_start" {
			return nil
		}
		if f.ID() == id && f.Event() == "job_end" {
			return fmt.Errorf("job %q ended at once: %s", command, f.Raw)
		}
	}
}

// End discards the kernel's frames until Stdout ends. It returns nil when Stdout reached
// a clean EOF within d (zero means Timeout), and an error when it did not, or when the
// stream broke the protocol (a malformed frame, one cut at EOF) or failed. Once Stdout
// has ended, End returns the same at once.
func (c *Client) End(d time.Duration) error {
	return c.rd.end(cmp.Or(d, c.timeout()))
}

// Start starts a kernel of tr from spec and reads its hello, failing t if either fails.
// An empty spec.SessionID becomes one named after the test, an empty Dir a fresh
// t.TempDir(), and a nil Stderr a bounded buffer logged if the test fails. Start and each
// wait are bounded by 30 s.
//
// When the test ends, a cleanup stops the kernel (as Stop does) and reads its Stdout to
// a clean EOF (as End does), reporting what fails; the test may have done either before.
func Start(t testing.TB, tr transports.Transport, spec transports.Spec) (transports.Kernel, *Client) {
	t.Helper()
	spec.SessionID = cmp.Or(spec.SessionID, sessionID(t))
	if spec.Dir == "" {
		spec.Dir = t.TempDir()
	}
	k, c := start(t, tr, spec, defaultTimeout)
	if _, err := c.Hello(); err != nil {
		t.Fatal(err)
	}
	return k, c
}

// sessionID names a session after the test.
func sessionID(t testing.TB) string {
	return "tt-" + strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
}

// start starts a kernel from sp and registers its end for the end of the test: Stop,
// then a clean EOF on Stdout, each bounded by d. With a nil sp.Stderr it keeps the
// kernel's stderr and logs it if the test failed.
func start(t testing.TB, tr transports.Transport, sp transports.Spec, d time.Duration) (transports.Kernel, *Client) {
	t.Helper()
	var stderr *boundedBuffer
	if sp.Stderr == nil {
		stderr = &boundedBuffer{limit: 64 << 10}
		sp.Stderr = stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	k, err := tr.Start(ctx, sp)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	c := NewClient(k)
	c.Timeout = d
	t.Cleanup(func() {
		stop(t, k, d)
		if err := c.End(d); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		if stderr != nil && t.Failed() {
			t.Logf("kernel stderr:\n%s", stderr.String())
		}
	})
	return k, c
}

// Stop kills k and waits for its end, within 30 s, reporting an error of either to t. It
// may be called again after the end (Kill and Wait then return at once).
func Stop(t testing.TB, k transports.Kernel) {
	t.Helper()
	stop(t, k, defaultTimeout)
}

func stop(t testing.TB, k transports.Kernel, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := k.Kill(ctx); err != nil {
		t.Errorf("kill: %v", err)
	}
	// A kernel let go (transports.Detachable) is finished for this controller: its Wait
	// says so, or reports the end its process had (a local kernel is still our child).
	if _, err := k.Wait(); err != nil && !errors.Is(err, link.ErrDetached) {
		t.Errorf("wait: %v", err)
	}
}
