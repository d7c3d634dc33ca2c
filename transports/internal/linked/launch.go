package linked

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kennel-dev/kennel/link"
	"github.com/kennel-dev/kennel/transports"
)

// Launch is the Dialer of a kernel socket on this machine's file system while its kernel
// starts. Until Started is called, a socket that is not there yet or not listening yet is
// retried (not ErrGone) for as long as exited stays open (the kernel has not ended);
// afterwards it is link.DialUnix's: no socket proves the kernel gone.
type Launch struct {
	sock    string
	exited  <-chan struct{}
	started atomic.Bool
}

// NewLaunch returns the launch dialer of sock for a kernel whose end closes exited.
func NewLaunch(sock string, exited <-chan struct{}) *Launch {
	return &Launch{sock: sock, exited: exited}
}

// Started ends the launch: from now on no socket is proof.
func (l *Launch) Started() { l.started.Store(true) }

// Dial is the link.Dialer.
func (l *Launch) Dial(ctx context.Context) (net.Conn, error) {
	c, err := link.DialUnix(l.sock)(ctx)
	if err != nil && !l.started.Load() && errors.Is(err, link.ErrGone) {
		select {
		case <-l.exited:
		default:
			return nil, fmt.Errorf("kernel socket not up yet: %v", err) // retried
		}
	}
	return c, err
}

// NewRun makes a new detached kernel's run directory under root (root made 0700 when
// missing): 0700, given to the kernel's uid:gid. It returns the kernel's fresh id (the
// directory's name) and token, and the directory; kind names the transport ("Docker")
// in the error of a chown refused. On error nothing is left.
func NewRun(root string, uid, gid int, kind string) (kid, token, runDir string, err error) {
	idb, tok := make([]byte, 8), make([]byte, 32)
	_, _ = rand.Read(idb) // never fails
	_, _ = rand.Read(tok)
	kid, token = hex.EncodeToString(idb), hex.EncodeToString(tok)
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", "", "", fmt.Errorf("run directory root: %w", err)
	}
	runDir = filepath.Join(root, kid)
	if err := os.Mkdir(runDir, 0o700); err != nil {
		return "", "", "", fmt.Errorf("run directory: %w", err)
	}
	if err := os.Chown(runDir, uid, gid); err != nil {
		_ = os.RemoveAll(runDir)
		return "", "", "", fmt.Errorf("give the run directory to the kernel's user %d:%d (a detached %s kernel needs a controller that may chown): %w", uid, gid, kind, err)
	}
	return kid, token, runDir, nil
}

// Open opens the first link of a detached kernel just started in a container, with its
// run directory runDir on this host: its kernel.sock, dialled through a Launch (exited
// closes at the kernel's end) for up to 30 s. A failure waits for what a kernel that ended
// still says to arrive (up to a second) and returns its kernel.log with the error.
func Open(ctx context.Context, runDir, kid, token string, grace time.Duration, exited <-chan struct{}) (cl *link.Client, log []byte, err error) {
	launch := NewLaunch(filepath.Join(runDir, "kernel.sock"), exited)
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err = link.Open(lctx, link.Options{
		Kernel: kid, Token: token, Grace: grace, Dial: launch.Dial,
		Backoff: link.Backoff{First: time.Millisecond, Max: 100 * time.Millisecond, Tries: 300},
	})
	if err != nil {
		select {
		case <-exited:
			time.Sleep(100 * time.Millisecond)
		case <-time.After(time.Second):
		}
		log, _ = os.ReadFile(filepath.Join(runDir, "kernel.log"))
		return nil, log, err
	}
	launch.Started()
	return cl, nil, nil
}

// Kernel is what every detached kernel over a link has, whatever its transport: the
// link's streams, its Info, its Record and the link itself. Its transport adds the kill
// and the end.
type Kernel struct {
	*Streams
	client *link.Client
	info   transports.Info
	rec    transports.Record
}

// NewKernel is the kernel reached over cl, named info, recorded as rec.
func NewKernel(cl *link.Client, info transports.Info, rec transports.Record) Kernel {
	return Kernel{Streams: New(cl), client: cl, info: info, rec: rec}
}

// Info is the kernel's Info.
func (k *Kernel) Info() transports.Info { return k.info }

// SetJobOutDir sets Info.JobOutDir (where the kernel sees the session's FIFO directory).
func (k *Kernel) SetJobOutDir(dir string) { k.info.JobOutDir = dir }

// SetPool sets Info.Pool: whether the kernel came from a warm pool (transports.PoolHit)
// or started cold beside one (transports.PoolMiss). It is called before the kernel is
// anyone's but its transport's.
func (k *Kernel) SetPool(word string) { k.info.Pool = word }

// Detach lets the kernel go: its link closes and it runs on, alone, for its grace.
func (k *Kernel) Detach() error { return k.client.Close() }

// Record is what a later controller reattaches from, its applied seq current.
func (k *Kernel) Record() transports.Record {
	r := k.rec
	r.Applied = k.client.Applied()
	return r
}

// Link is the kernel's link.
func (k *Kernel) Link() *link.Client { return k.client }

// Detached is a detached kernel whose end is its Watch's: a Kernel with Kill, Wait, Ended
// and Exit (the container transports' detached kernels; local and ssh embed it and may
// bring their own Kill). A transport makes it with NewDetached, then sets Watch (whose
// steps use the kernel's Stdin) before handing it out.
type Detached struct {
	Kernel
	// Watch stages the kernel's kill and reaps it. Required.
	Watch *transports.Watch
}

// NewDetached is the kernel reached over cl, named info, recorded as rec.
func NewDetached(cl *link.Client, info transports.Info, rec transports.Record) *Detached {
	return &Detached{Kernel: NewKernel(cl, info, rec)}
}

// Kill ends the kernel through its Watch's stages.
func (k *Detached) Kill(ctx context.Context) error { return k.Watch.Kill(ctx) }

// Wait blocks until the kernel has ended and its objects are released.
func (k *Detached) Wait() (transports.Exit, error) { return k.Watch.Wait() }

// Ended is closed once the kernel's end is known, before its release (transports.Ender).
func (k *Detached) Ended() <-chan struct{} { return k.Watch.Ended() }

// Exit returns how the kernel ended, once Ended is closed (transports.Ender).
func (k *Detached) Exit() transports.Exit { return k.Watch.Exit() }

// RunRecord reports whether rec can be a record of a detached kernel of the container
// transport name: a kernel, its token and its container (Where), and a run directory on
// this host that is root's child named for the kernel.
func RunRecord(rec transports.Record, name, root string) bool {
	return rec.Transport == name && rec.Kernel != "" && rec.Token != "" && rec.Where != "" && root != "" &&
		filepath.Clean(rec.RunDir) == rec.RunDir && filepath.Dir(rec.RunDir) == filepath.Clean(root) && filepath.Base(rec.RunDir) == rec.Kernel
}

// Reattach opens the link to the detached kernel rec records again: its kernel.sock in
// rec.RunDir, with the record's token and frames applied and grace as the kernel's. gone
// reports an error that proves the kernel gone (no socket, or none listening). A hello
// naming another process than the record's (rec.PID set) is link.ErrBadHello, the link
// closed. On success rec's pid, group and leader are the hello's.
func Reattach(ctx context.Context, rec *transports.Record, grace time.Duration) (cl *link.Client, gone bool, err error) {
	cl, err = link.Open(ctx, link.Options{
		Kernel: rec.Kernel, Token: rec.Token, Grace: grace, Applied: rec.Applied,
		Dial: link.DialUnix(filepath.Join(rec.RunDir, "kernel.sock")),
	})
	if err != nil {
		return nil, errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED), err
	}
	h := cl.Hello()
	if rec.PID > 0 && (h.PID != rec.PID || h.PGID != rec.PGID || h.Leader != rec.Leader) {
		cl.Close()
		return nil, false, fmt.Errorf("its hello names pid %d (group %d, start %d), the record %d (group %d, start %d): %w",
			h.PID, h.PGID, h.Leader, rec.PID, rec.PGID, rec.Leader, link.ErrBadHello)
	}
	rec.PID, rec.PGID, rec.Leader = h.PID, h.PGID, h.Leader
	return cl, false, nil
}
