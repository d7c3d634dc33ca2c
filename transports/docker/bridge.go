package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports/internal/kernelstart"
)

// execRunner runs commands as execs in container, as the Options' user, with env: the
// bridges of exec-mode detached kernels. A container that is gone or has stopped is
// link.ErrGone: its kernel has ended with it.
func (t *Transport) execRunner(container string, env []string) kernelstart.Runner {
	return func(ctx context.Context, argv []string, stderr io.Writer) (kernelstart.Proc, error) {
		created, err := t.cli.ExecCreate(ctx, container, client.ExecCreateOptions{
			User:         t.opts.User,
			AttachStdin:  true,
			AttachStdout: true,
			AttachStderr: true,
			Env:          env,
			Cmd:          argv,
		})
		if err != nil {
			return nil, t.execError(ctx, container, err)
		}
		att, err := t.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
		if err != nil {
			return nil, t.execError(ctx, container, err)
		}
		return newExecProc(t.cli, created.ID, att.HijackedResponse, stderr), nil
	}
}

// execError classes an exec that could not be made in container: the container gone,
// or not running (not merely paused), proves its kernels gone (link.ErrGone); an engine
// out of reach is transports.ErrUnavailable.
func (t *Transport) execError(ctx context.Context, container string, err error) error {
	gone := cerrdefs.IsNotFound(err)
	if cerrdefs.IsConflict(err) {
		ins, ierr := t.cli.ContainerInspect(ctx, container, client.ContainerInspectOptions{})
		gone = cerrdefs.IsNotFound(ierr) ||
			ierr == nil && ins.Container.State != nil && !ins.Container.State.Running && !ins.Container.State.Paused
	}
	if gone {
		return fmt.Errorf("exec in container %s: %w: %w", container, link.ErrGone, err)
	}
	return fmt.Errorf("exec in container %s: %w", container, classify(err))
}

// execProc is one exec, its attached stream as a kernelstart.Proc: Write writes its
// stdin, Read reads its stdout, demultiplexed from the stream (stderr goes to the
// runner's writer) through a net.Pipe, so a read deadline wakes a Read and can be set
// again (net.Conn's contract), while the stream itself is read with none.
type execProc struct {
	cli    client.APIClient
	id     string
	conn   client.HijackedResponse
	stdout net.Conn      // the reading end
	demux  chan struct{} // closed once the stream has been read to its end
	once   sync.Once
}

func newExecProc(cli client.APIClient, id string, conn client.HijackedResponse, stderr io.Writer) *execProc {
	if stderr == nil {
		stderr = io.Discard
	}
	out, in := net.Pipe()
	p := &execProc{cli: cli, id: id, conn: conn, stdout: out, demux: make(chan struct{})}
	go func() {
		defer close(p.demux)
		_, _ = stdcopy.StdCopy(in, stderr, conn.Reader)
		in.Close() // the reader sees EOF
	}()
	return p
}

func (p *execProc) Read(b []byte) (int, error) {
	n, err := p.stdout.Read(b)
	if errors.Is(err, io.ErrClosedPipe) {
		err = net.ErrClosed
	}
	return n, err
}

func (p *execProc) Write(b []byte) (int, error) { return p.conn.Conn.Write(b) }

// Close ends the attached stream: the exec's stdin ends, and the bridge with it.
func (p *execProc) Close() error {
	p.once.Do(func() {
		_ = p.conn.CloseWrite()
		p.conn.Close()
		p.stdout.Close() // a demultiplexer blocked on it returns
	})
	return nil
}

// Exit waits for the stream's end, then for the engine to report the exec ended.
func (p *execProc) Exit(ctx context.Context) (int, error) {
	select {
	case <-p.demux:
	case <-ctx.Done():
		return -1, context.Cause(ctx)
	}
	return execExit(ctx, p.cli, p.id)
}

// execExit polls the engine until exec id no longer runs, or ctx ends (its cause), and
// returns its exit code.
func execExit(ctx context.Context, cli client.APIClient, id string) (int, error) {
	for {
		ins, err := cli.ExecInspect(ctx, id, client.ExecInspectOptions{})
		if err != nil {
			return -1, fmt.Errorf("inspect exec %.12s: %w", id, err)
		}
		if !ins.Running {
			return ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return -1, context.Cause(ctx)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *execProc) LocalAddr() net.Addr  { return p.conn.Conn.LocalAddr() }
func (p *execProc) RemoteAddr() net.Addr { return p.conn.Conn.RemoteAddr() }

func (p *execProc) SetDeadline(t time.Time) error {
	return errors.Join(p.stdout.SetReadDeadline(t), p.conn.Conn.SetWriteDeadline(t))
}
func (p *execProc) SetReadDeadline(t time.Time) error  { return p.stdout.SetReadDeadline(t) }
func (p *execProc) SetWriteDeadline(t time.Time) error { return p.conn.Conn.SetWriteDeadline(t) }
