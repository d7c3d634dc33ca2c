package kernelstart

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
	"github.com/kennel-dev/kennel/transports/internal/linked"
)

// Bridged says how one transport reaches its detached kernels through bridges run in
// their sandbox (the wrapped transport, Docker exec mode): every connection is an attach
// bridge's stdio, every signal a signal bridge, and a gone kernel's run directory goes
// with a cleanup bridge.
type Bridged struct {
	// Transport is the transport's name (Info.Transport, Record.Transport). Required.
	Transport string
	// Run runs a command in the sandbox. Required.
	Run Runner
	// Prefix goes before the interpreter in each bridge's argv (a wrapper's argv, `env
	// -i PATH=...`); nil for none.
	Prefix []string
	// Python is the sandbox's interpreter the bridges run with. Required.
	Python string
	// Root is the sandbox directory the run directories are made in: a record whose run
	// directory is not a child of it is refused. Required for Reattach.
	Root string
	// Where is the Record.Where of the kernels ("" for none); Info.ID is Where, ":" and
	// the run directory (the run directory alone without Where).
	Where string
	// Grace is how long a kernel lives with nothing attached (link.Options.Grace).
	Grace time.Duration
	// StdinGrace and TermGrace are Kill's waits after the shutdown and after the TERM
	// (already resolved: zero waits not at all).
	StdinGrace, TermGrace time.Duration
}

// BridgedKernel is a detached kernel reached through bridges (Bridged). It is a
// transports.Kernel and a transports.Detachable; its Info names the transport and the
// kernel's place (Bridged.Where and its run directory), its pids are its sandbox's
// (Info.PID is 0).
//
// Kill sends shutdown over the link and waits StdinGrace, then runs the signal bridge with
// TERM for the kernel's group and waits TermGrace, then with KILL (the kernel stopped,
// everything below it and its group SIGKILLed), each checked against the hello's pid,
// group and leader start time in the sandbox. The end is confirmed only by the link
// proving the kernel gone (an attach bridge that finds no kernel there, or a refused
// attach); then a cleanup bridge removes the run directory (not after a refusal: that
// directory is another kernel's). Wait reports Exit{} for a kernel proven gone (its exit
// status is its sandbox's, not known here), and after Detach an error matching
// link.ErrDetached: the kernel runs on.
type BridgedKernel struct {
	linked.Kernel
	b     Bridged
	watch *transports.Watch

	mu     sync.Mutex
	ctlErr error // the last signal bridge's failure, for Kill's error
	endErr error // the link's end, before Reap read it as the kernel's
}

var _ transports.Detachable = (*BridgedKernel)(nil)

// ErrKilledOutside is the end of a detached kernel that was killed, not by Kill and not
// ending by itself (it left its socket): most often a wrapper whose pid namespace ends,
// and every process in it, with the command that started the kernel (bwrap
// --unshare-pid --die-with-parent), at the first connection's end. It matches
// errdefs.ErrAborted.
var ErrKilledOutside = errdefs.ErrAborted.WithMessage("killed from outside, not by Kill: its socket was left " +
	"(a wrapper whose pid namespace ends with its first command, as bwrap --unshare-pid --die-with-parent, " +
	"kills a detached kernel when that command ends)")

// RunDir is the run directory of kernel id under Root.
func (b Bridged) RunDir(id string) string { return path.Join(b.Root, id) }

// Start attaches to a kernel whose start command is connected: first is that command
// (OpenBridge of a DetachedProgram start), the kernel's first connection; rec names the
// kernel (Kernel, RunDir, Token); the rest comes from its hello. Later connections are
// attach bridges. ctx bounds only the handshake.
func (b Bridged) Start(ctx context.Context, first net.Conn, rec transports.Record) (*BridgedKernel, error) {
	client, err := link.Open(ctx, link.Options{Kernel: rec.Kernel, Token: rec.Token, Grace: b.Grace, Dial: b.dialer(rec.RunDir, first)})
	if err != nil {
		first.Close()
		return nil, fmt.Errorf("attach to detached %s kernel %s: %w", b.Transport, rec.Kernel, err)
	}
	h := client.Hello()
	rec.PID, rec.PGID, rec.Leader = h.PID, h.PGID, h.Leader
	return b.newKernel(client, rec), nil
}

// Reattach attaches to the kernel rec names through an attach bridge, resuming after
// rec.Applied. A record that is not this transport's, or whose run directory is not a
// child of Root, is refused (errdefs.ErrInvalidArgument). A kernel proven gone is an
// error matching errdefs.ErrNotFound (link.ErrGone): when no kernel is there its run
// directory is removed; a refused attach (a wrong token) leaves everything as it is. A
// hello whose pid, group or leader start time is not the record's is link.ErrBadHello.
// A sandbox out of reach is errdefs.ErrUnavailable. ctx bounds only the attach.
func (b Bridged) Reattach(ctx context.Context, rec transports.Record) (*BridgedKernel, error) {
	if err := b.check(rec); err != nil {
		return nil, fmt.Errorf("reattach %s kernel %q: %w", b.Transport, rec.Kernel, err)
	}
	client, err := link.Open(ctx, link.Options{
		Kernel: rec.Kernel, Token: rec.Token, Grace: b.Grace, Dial: b.dialer(rec.RunDir, nil), Applied: rec.Applied,
	})
	if err != nil {
		if NoKernel(err) {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			_, _ = b.Cleanup(cctx, rec.RunDir)
			cancel()
		}
		return nil, fmt.Errorf("reattach %s kernel %s: %w", b.Transport, rec.Kernel, err)
	}
	h := client.Hello()
	if rec.PID > 0 && (h.PID != rec.PID || h.PGID != rec.PGID || h.Leader != rec.Leader) {
		client.Close()
		return nil, fmt.Errorf("reattach %s kernel %s: its hello names pid %d (group %d, start %d), the record %d (group %d, start %d): %w",
			b.Transport, rec.Kernel, h.PID, h.PGID, h.Leader, rec.PID, rec.PGID, rec.Leader, link.ErrBadHello)
	}
	rec.PID, rec.PGID, rec.Leader = h.PID, h.PGID, h.Leader
	return b.newKernel(client, rec), nil
}

// check refuses a record Reattach must not follow: another transport's, one without its
// id or token, or a run directory that is not Root/<id> (a cleanup would remove it).
func (b Bridged) check(rec transports.Record) error {
	var why string
	switch {
	case rec.Transport != b.Transport:
		why = fmt.Sprintf("a %q record", rec.Transport)
	case rec.Kernel == "" || rec.Token == "":
		why = "no kernel id or token"
	case b.Root == "":
		why = "the transport has no run directory root (Options.RunDir)"
	case strings.IndexByte(rec.RunDir, 0) >= 0 || !path.IsAbs(rec.RunDir) || path.Clean(rec.RunDir) != rec.RunDir ||
		path.Base(rec.RunDir) != rec.Kernel || path.Dir(rec.RunDir) != path.Clean(b.Root):
		why = fmt.Sprintf("run directory %q is not %s/<kernel id>", rec.RunDir, path.Clean(b.Root))
	default:
		return nil
	}
	return fmt.Errorf("record not this transport's: %s: %w", why, errdefs.ErrInvalidArgument)
}

// Cleanup removes a gone kernel's run directory in the sandbox (a cleanup bridge): only a
// 0700 directory of the bridge's user that holds nothing but a kernel's files. killed
// reports that the kernel had left its socket: it did not end by itself (it removes its
// socket then) but was killed.
func (b Bridged) Cleanup(ctx context.Context, runDir string) (killed bool, err error) {
	code, out, said, err := RunBridge(ctx, b.Run, BridgeArgv(b.Prefix, b.Python, "cleanup", runDir))
	if err == nil && code != 0 {
		err = &BridgeError{Action: "cleanup", Code: code, Stderr: said}
	}
	if err != nil {
		return false, fmt.Errorf("remove run directory %s: %w", runDir, err)
	}
	return strings.TrimSpace(out) == "killed", nil
}

// dialer returns first on its first call, when set, and otherwise an attach bridge's
// connection.
func (b Bridged) dialer(runDir string, first net.Conn) link.Dialer {
	var mu sync.Mutex
	return func(ctx context.Context) (net.Conn, error) {
		mu.Lock()
		c := first
		first = nil
		mu.Unlock()
		if c != nil {
			return c, nil
		}
		return OpenBridge(ctx, b.Run, "attach", BridgeArgv(b.Prefix, b.Python, "attach", runDir), nil, nil)
	}
}

func (b Bridged) newKernel(client *link.Client, rec transports.Record) *BridgedKernel {
	rec.Transport, rec.Where = b.Transport, b.Where
	id := rec.RunDir
	if b.Where != "" {
		id = b.Where + ":" + rec.RunDir
	}
	k := &BridgedKernel{Kernel: linked.NewKernel(client, transports.Info{Transport: b.Transport, ID: id}, rec), b: b}
	k.watch = transports.NewWatch(transports.WatchSpec{
		What: fmt.Sprintf("detached %s kernel %s", b.Transport, rec.Kernel),
		Steps: []transports.Step{
			{Act: func() { _ = k.Stdin().Close() }, Grace: b.StdinGrace},
			{Act: func() { k.signal("TERM") }, Grace: b.TermGrace},
			{Act: func() { k.signal("KILL") }},
		},
		Reap: func(func() bool) (transports.Exit, error) {
			<-client.Done()
			err := client.Err()
			k.mu.Lock()
			k.endErr = err
			k.mu.Unlock()
			if errors.Is(err, link.ErrGone) {
				return transports.Exit{}, nil
			}
			return transports.Exit{}, err // detached, or out of reach: it may run on
		},
		Release: func(exit transports.Exit, err error) error {
			k.mu.Lock()
			end := k.endErr
			k.mu.Unlock()
			if err != nil || !NoKernel(end) {
				return err // a refused attach leaves the directory to its kernel
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			killed, err := b.Cleanup(ctx, rec.RunDir)
			if err == nil && killed && !exit.Killed {
				err = fmt.Errorf("detached %s kernel %s: %w", b.Transport, rec.Kernel, ErrKilledOutside)
			}
			return err
		},
	})
	return k
}

// signal runs the signal bridge for the kernel's group; a failure is kept for Kill's
// error. A bridge that finds no kernel is no failure: the link proves the end.
func (k *BridgedKernel) signal(sig string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rec := k.Record()
	code, _, said, err := RunBridge(ctx, k.b.Run, BridgeArgv(k.b.Prefix, k.b.Python, "signal", rec.RunDir,
		strconv.Itoa(rec.PID), strconv.Itoa(rec.PGID), strconv.FormatUint(rec.Leader, 10), sig))
	if err == nil && code != 0 && code != BridgeGone {
		err = &BridgeError{Action: "signal", Code: code, Stderr: said}
	}
	if err != nil {
		k.mu.Lock()
		k.ctlErr = fmt.Errorf("signal %s: %w", sig, err)
		k.mu.Unlock()
	}
}

// Kill ends the kernel in the stages BridgedKernel describes and returns once the link
// has proven it gone and its run directory is removed, or ctx ends: then the error says
// so, with why a signal failed if one did (a kernel in another pid namespace than its
// bridges', say), and the stages go on.
func (k *BridgedKernel) Kill(ctx context.Context) error {
	err := k.watch.Kill(ctx)
	if err != nil {
		k.mu.Lock()
		ctl := k.ctlErr
		k.mu.Unlock()
		if ctl != nil {
			err = fmt.Errorf("%w (and %v)", err, ctl)
		}
	}
	return err
}

// Wait blocks until the kernel is proven gone (Exit{}, or Exit.Killed after Kill) and its
// run directory removed, or its link ended otherwise: after Detach an error matching
// link.ErrDetached, the kernel running on; reattaching out of tries, link.ErrUnreachable.
// A kernel found killed that Kill did not kill (it left its socket) is ErrKilledOutside.
func (k *BridgedKernel) Wait() (transports.Exit, error) { return k.watch.Wait() }
