package ssh

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/kennel-dev/kennel/images"
	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/linked"
)

// DefaultKernelGrace is how long a detached remote kernel lives with nothing attached
// when Options.KernelGrace is zero.
const DefaultKernelGrace = time.Hour

// detachedKernel is a remote kernel started detached: the start command forks it into a
// session of its own and exits once its socket is up; the controller reaches kernel.sock
// in the run directory through the host connection's streamlocal forwarding
// (client.Dial("unix", path)), so a dropped connection is reattached over a fresh one.
// Its streams, end, record and Detach are linked.Detached's; Kill is its own.
type detachedKernel struct {
	*linked.Detached
	t      *Transport
	target Target
	python string
	runID  string
	runDir string
	// unreachable: a remote signal found the host out of reach.
	unreachable atomic.Bool
}

// startDetached runs the start command with the block (KENNEL_KERNEL_RUN set) and the
// token after it, waits for it to report the socket, and attaches.
func (t *Transport) startDetached(ctx context.Context, hc *hostConn, target Target, python, runID, runDir string, preamble []byte) (transports.Kernel, error) {
	tok := make([]byte, 32)
	_, _ = rand.Read(tok) // never fails
	token := hex.EncodeToString(tok)
	stdin := append(append([]byte(nil), preamble...), token+"\n"...)
	out, err := runRemote(ctx, hc.c, "start detached kernel "+runID+" on "+target.String(), kernelScript, strings.NewReader(string(stdin)), 64<<10)
	if err != nil {
		_, _ = t.hosts.control(context.WithoutCancel(ctx), target, python, runID, "CLEANUP")
		var st exitStatus
		if errors.As(err, &st) && (st == 126 || st == 127) {
			err = fmt.Errorf("%w: %w", ErrUnsupported, err) // no such interpreter there
		}
		return nil, fmt.Errorf("start detached kernel on %s: %w (%s)", target, err, strings.TrimSpace(string(out)))
	}
	k, err := t.attach(ctx, target, python, transports.Record{Transport: Name, Kernel: runID, RunDir: runDir, Token: token, Where: target.String()})
	if err != nil {
		_, _ = t.hosts.control(context.WithoutCancel(ctx), target, python, runID, "CLEANUP")
		return nil, fmt.Errorf("attach to detached kernel %s on %s: %w", runID, target, err)
	}
	return k, nil
}

// attach reaches the kernel rec names on target and sets up its end.
func (t *Transport) attach(ctx context.Context, target Target, python string, rec transports.Record) (*detachedKernel, error) {
	runID := rec.Kernel
	k := &detachedKernel{t: t, target: target, python: python, runID: runID, runDir: rec.RunDir}
	client, err := link.Open(ctx, link.Options{
		Kernel: rec.Kernel, Token: rec.Token, Grace: t.kernelGrace(), Applied: rec.Applied, Heartbeat: t.opts.Heartbeat,
		Dial: k.dialer(path.Join(rec.RunDir, "kernel.sock")),
	})
	if err != nil {
		return nil, err
	}
	h := client.Hello()
	rec.PID, rec.PGID, rec.Leader, rec.Grace = h.PID, h.PGID, h.Leader, t.kernelGrace()
	k.Detached = linked.NewDetached(client, transports.Info{Transport: Name, ID: target.String() + ":" + rec.RunDir}, rec)
	k.Watch = transports.NewWatch(transports.WatchSpec{
		What: "detached ssh kernel " + runID,
		Steps: []transports.Step{
			{Act: func() { _ = k.Stdin().Close() }, Grace: transports.ResolveGrace(t.opts.StdinGrace)},
			{Act: func() { _ = k.control("TERM") }, Grace: transports.ResolveGrace(t.opts.TermGrace)},
			{Act: func() { _ = k.control("KILL") }, Grace: 5 * time.Second},
			{Act: func() { _ = client.Close() }},
		},
		Reap: func(func() bool) (transports.Exit, error) {
			<-client.Done()
			err := client.Err()
			if errors.Is(err, link.ErrGone) {
				err = nil
			}
			return transports.Exit{}, err
		},
		Release: func(_ transports.Exit, err error) error {
			if errors.Is(err, link.ErrDetached) {
				return err // let go, not ended: the kernel runs on for its grace
			}
			// What the kernel left (a marked process) goes, and the run directory.
			if _, cerr := k.t.hosts.control(context.Background(), target, python, runID, "CLEANUP"); cerr != nil && err == nil {
				err = cerr
			}
			return err
		},
	})
	return k, nil
}

// Reattach reaches a detached remote kernel again from its record: the record must be
// of this transport's host (Where), and the kernel is attached over the host's
// connection as at its start. A kernel the host says has ended (or that refuses the
// record's token) is errdefs.ErrNotFound, and what it left on the host is cleared; a host
// out of reach is errdefs.ErrUnavailable: the kernel may still run there.
func (t *Transport) Reattach(ctx context.Context, rec transports.Record) (transports.Kernel, error) {
	target, err := t.hosts.Resolve(t.opts.Target)
	if err != nil {
		return nil, fmt.Errorf("reattach ssh kernel %q: %w", rec.Kernel, err)
	}
	if rec.Transport != Name || rec.Kernel == "" || rec.Token == "" || path.Base(rec.RunDir) != rec.Kernel || rec.Where != target.String() {
		return nil, fmt.Errorf("reattach ssh kernel %q: a record of %q, not of this transport's host %s: %w", rec.Kernel, rec.Where, target, errdefs.ErrInvalidArgument)
	}
	b, err := images.Stub()
	if err != nil {
		return nil, err
	}
	_, p, err := t.hosts.stage(ctx, t.opts.Target, b)
	if err != nil {
		return nil, fmt.Errorf("reattach ssh kernel %s on %s: %w", rec.Kernel, target, err)
	}
	k, err := t.attach(ctx, target, p.PythonPath, rec)
	if err != nil {
		if errors.Is(err, link.ErrGone) {
			_, _ = t.hosts.control(context.WithoutCancel(ctx), target, p.PythonPath, rec.Kernel, "CLEANUP")
		}
		return nil, fmt.Errorf("reattach ssh kernel %s on %s: %w", rec.Kernel, target, err)
	}
	return k, nil
}

var (
	_ transports.Detachable = (*detachedKernel)(nil)
	_ transports.Reattacher = (*Transport)(nil)
)

func (t *Transport) kernelGrace() time.Duration {
	if t.opts.KernelGrace > 0 {
		return t.opts.KernelGrace
	}
	return DefaultKernelGrace
}

// dialer reaches the remote socket over the host's current connection. A failed dial is
// proof of the kernel's end only when the host answers that the recorded kernel no longer
// runs (the ALIVE control action); a host out of reach is retried.
func (k *detachedKernel) dialer(sock string) link.Dialer {
	return func(ctx context.Context) (net.Conn, error) {
		hc, err := k.t.hosts.connFor(ctx, k.target)
		if err != nil {
			return nil, err
		}
		c, err := hc.c.DialContext(ctx, "unix", sock)
		if err == nil {
			return c, nil
		}
		alive, aerr := k.t.hosts.control(ctx, k.target, k.python, k.runID, "ALIVE")
		if aerr == nil && alive == "0" {
			return nil, fmt.Errorf("%w: kernel %s on %s has ended (%v)", link.ErrGone, k.runID, k.target, err)
		}
		return nil, fmt.Errorf("dial %s on %s: %w", sock, k.target, err)
	}
}

// control runs a control action for the kernel on its host.
func (k *detachedKernel) control(action string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := k.t.hosts.control(ctx, k.target, k.python, k.runID, action)
	if errors.Is(err, ErrUnreachable) {
		k.unreachable.Store(true)
	}
	return err
}

// Kill ends the kernel: shutdown over the link, then the remote TERM and KILL ladder; the
// end is its link's proof that it is gone, then the run's sweep.
//
// The signals run on the remote host; when it is out of reach Kill's error says so, and
// that the kernel's own grace ends it there (it ends unattached past its grace).
func (k *detachedKernel) Kill(ctx context.Context) error {
	err := k.Watch.Kill(ctx)
	if !k.unreachable.Load() {
		return err
	}
	if err == nil {
		// The ladder ran out by letting the link go: the end was not seen on the host.
		if _, werr := k.Watch.Wait(); !errors.Is(werr, link.ErrDetached) {
			return werr
		}
		err = ErrUnreachable
	}
	return fmt.Errorf("kill detached kernel %s: %w: %s is out of reach, so the kernel could not be signalled there; with nothing attached it ends by itself within its grace (%v)", k.runID, err, k.target, k.t.kernelGrace())
}
