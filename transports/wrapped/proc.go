package wrapped

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// procCloseGrace is how long a closed bridge command may take to end by itself (its
// stdin closed) before its process group is SIGKILLed. The kernel is in a session of its
// own by the time a bridge is connected, so the signal never reaches it.
const procCloseGrace = 2 * time.Second

// stderrSettle bounds how long Exit waits for the command's stderr to end after the
// command did (something in the sandbox may still hold it).
const stderrSettle = time.Second

// hostProc is one wrapper command on the host, running a bridge (or a detached kernel's
// start command) in the sandbox: its stdin and stdout pipes as a net.Conn.
type hostProc struct {
	pid    int
	in     *os.File // our end of its stdin
	out    *os.File // our end of its stdout
	copied chan struct{}
	exited chan struct{}
	code   int

	mu     sync.Mutex
	seen   bool // its exit has been seen: its group id may be free
	closed sync.Once
}

var _ kernelstart.Proc = (*hostProc)(nil)

// runner runs commands on the host in process groups of their own, with the host's
// environment (the wrapper's); a stdin pipe that holds grow bytes, when positive.
func runner(grow int) kernelstart.Runner {
	return func(ctx context.Context, argv []string, stderr io.Writer) (kernelstart.Proc, error) {
		if err := context.Cause(ctx); err != nil {
			return nil, err
		}
		return startProc(argv, stderr, grow)
	}
}

func startProc(argv []string, stderr io.Writer, grow int) (*hostProc, error) {
	cmd, ours, err := startWrapper(argv, grow, true)
	if err != nil {
		return nil, err
	}
	p := &hostProc{pid: cmd.Process.Pid, in: ours.stdin, out: ours.stdout, copied: make(chan struct{}), exited: make(chan struct{})}
	if stderr == nil {
		stderr = io.Discard
	}
	go func() {
		defer close(p.copied)
		_, _ = io.Copy(stderr, ours.stderr)
		ours.stderr.Close()
	}()
	go func() {
		// See the exit without reaping, so a SIGKILL of the group (Close) never reaches
		// a group that reuses its id.
		seeExit(p.pid)
		p.mu.Lock()
		p.seen = true
		p.mu.Unlock()
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	return p, nil
}

func (p *hostProc) Read(b []byte) (int, error)  { return p.out.Read(b) }
func (p *hostProc) Write(b []byte) (int, error) { return p.in.Write(b) }

// Close closes both pipes (the bridge sees its stdin end and exits), waits
// procCloseGrace for the command's end, then SIGKILLs its process group, and returns
// once it has ended.
func (p *hostProc) Close() error {
	p.closed.Do(func() {
		p.in.Close()
		p.out.Close()
		t := time.NewTimer(procCloseGrace)
		defer t.Stop()
		select {
		case <-p.exited:
			return
		case <-t.C:
		}
		p.mu.Lock()
		if !p.seen {
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		}
		p.mu.Unlock()
		<-p.exited
	})
	return nil
}

// Exit waits for the command's end and its stderr's (at most stderrSettle after it).
func (p *hostProc) Exit(ctx context.Context) (int, error) {
	select {
	case <-p.exited:
	case <-ctx.Done():
		return -1, context.Cause(ctx)
	}
	select {
	case <-p.copied:
	case <-time.After(stderrSettle):
	}
	return p.code, nil
}

func (p *hostProc) LocalAddr() net.Addr  { return procAddr(p.pid) }
func (p *hostProc) RemoteAddr() net.Addr { return procAddr(p.pid) }

func (p *hostProc) SetDeadline(t time.Time) error {
	return errors.Join(p.in.SetWriteDeadline(t), p.out.SetReadDeadline(t))
}
func (p *hostProc) SetReadDeadline(t time.Time) error  { return p.out.SetReadDeadline(t) }
func (p *hostProc) SetWriteDeadline(t time.Time) error { return p.in.SetWriteDeadline(t) }

// procAddr names a bridge connection by its wrapper's host pid.
type procAddr int

func (a procAddr) Network() string { return "wrapped" }
func (a procAddr) String() string  { return fmt.Sprintf("wrapper %d", int(a)) }
