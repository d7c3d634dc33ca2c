package linked

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

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

// Detached is a detached kernel of a container transport (Docker's run mode, containerd):
// its streams are its link's, its end is its Watch's, and it is let go of and recorded
// the same way for both. A transport makes it with NewDetached, then sets Watch (whose
// steps use the kernel's Stdin) before handing it out.
type Detached struct {
	*Streams
	client *link.Client
	info   transports.Info
	rec    transports.Record
	// Watch stages the kernel's kill and reaps it. Required.
	Watch *transports.Watch
}

// NewDetached is the kernel reached over cl, named info, recorded as rec.
func NewDetached(cl *link.Client, info transports.Info, rec transports.Record) *Detached {
	return &Detached{Streams: New(cl), client: cl, info: info, rec: rec}
}

// Info is the kernel's Info.
func (k *Detached) Info() transports.Info { return k.info }

// SetJobOutDir sets Info.JobOutDir (where the kernel sees the session's FIFO directory).
func (k *Detached) SetJobOutDir(dir string) { k.info.JobOutDir = dir }

// SetPool sets Info.Pool (whether a warm pool handed the kernel out).
func (k *Detached) SetPool(word string) { k.info.Pool = word }

// Kill ends the kernel through its Watch's stages.
func (k *Detached) Kill(ctx context.Context) error { return k.Watch.Kill(ctx) }

// Wait blocks until the kernel has ended and its objects are released.
func (k *Detached) Wait() (transports.Exit, error) { return k.Watch.Wait() }

// Ended is closed once the kernel's end is known, before its release (transports.Ender).
func (k *Detached) Ended() <-chan struct{} { return k.Watch.Ended() }

// Exit returns how the kernel ended, once Ended is closed (transports.Ender).
func (k *Detached) Exit() transports.Exit { return k.Watch.Exit() }

// Detach lets the kernel go: its link closes and it runs on for its grace.
func (k *Detached) Detach() error { return k.client.Close() }

// Record is what a later controller reattaches from, its applied seq current.
func (k *Detached) Record() transports.Record {
	r := k.rec
	r.Applied = k.client.Applied()
	return r
}

// Link is the kernel's link.
func (k *Detached) Link() *link.Client { return k.client }
