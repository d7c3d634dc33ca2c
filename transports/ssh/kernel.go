package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/kennel-dev/kennel/transports"
)

// cleanupTimeout bounds the remote sweep after a kernel's end.
const cleanupTimeout = 15 * time.Second

type kernelConfig struct {
	hosts      *Hosts
	target     Target
	python     string // the probe's interpreter, for control commands
	runID      string
	id         string
	preamble   []byte
	stderr     io.Writer
	stdinGrace time.Duration
	termGrace  time.Duration
}

// Kernel is a remote kernel: a session on the host's shared connection running the
// stub. It implements transports.Kernel.
//
// The controller never signals a remote pid locally: Kill closes the session's stdin and
// then runs the signal ladder on the host by a remote command; after the end a sweep on
// the host ends every process still marked with the kernel's run and removes its run
// directory.
type Kernel struct {
	cfg    kernelConfig
	sess   *xssh.Session
	stdin  io.WriteCloser
	stdout *sentinelReader
	info   transports.Info

	killCalled atomic.Bool
	ladder     *transports.Ladder
	exitSeen   chan struct{}
	finished   chan struct{}
	exit       transports.Exit
	err        error
}

func startKernel(ctx context.Context, c *xssh.Client, cfg kernelConfig) (*Kernel, error) {
	sess, err := c.NewSession()
	if err != nil {
		return nil, fmt.Errorf("open session on %s: %w: %w", cfg.target, err, ErrUnreachable)
	}
	stdin, err := sess.StdinPipe()
	if err != nil {
		sess.Close()
		return nil, err
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		sess.Close()
		return nil, err
	}
	if cfg.stderr != nil {
		sess.Stderr = cfg.stderr
	}
	if err := sess.Start(loginCommand(kernelScript)); err != nil {
		sess.Close()
		return nil, fmt.Errorf("run kernel on %s: %w: %w", cfg.target, err, ErrUnreachable)
	}
	// The preamble is small next to the channel's window: it does not wait for the host.
	if _, err := stdin.Write(cfg.preamble); err != nil {
		sess.Close()
		return nil, fmt.Errorf("send start block to %s: %w: %w", cfg.target, err, ErrUnreachable)
	}
	k := &Kernel{
		cfg:      cfg,
		sess:     sess,
		stdin:    stdin,
		stdout:   newSentinelReader(stdout),
		info:     transports.Info{Transport: Name, ID: cfg.id},
		exitSeen: make(chan struct{}),
		finished: make(chan struct{}),
	}
	k.newLadder()
	go k.watch()
	return k, nil
}

func (k *Kernel) watch() {
	werr := k.sess.Wait()
	killed := k.killCalled.Load()
	close(k.exitSeen)
	k.exit, k.err = exitOf(werr, killed, k.cfg.target)
	// Sweep what the kernel left on the host (cells' children, a job's stray process)
	// and remove its run directory. A host out of reach keeps them: the stub's own EOF
	// shutdown is then all there is.
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	_, _ = k.cfg.hosts.control(ctx, k.cfg.target, k.cfg.python, k.cfg.runID, "CLEANUP")
	cancel()
	k.sess.Close()
	close(k.finished)
}

// signalNames maps the names ssh reports in exit-signal to numbers (Linux numbering).
var signalNames = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "FPE": 8,
	"KILL": 9, "SEGV": 11, "PIPE": 13, "ALRM": 14, "TERM": 15, "USR1": 10, "USR2": 12}

func exitOf(werr error, killed bool, t Target) (transports.Exit, error) {
	e := transports.Exit{Killed: killed}
	var ee *xssh.ExitError
	var missing *xssh.ExitMissingError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		e.Code = ee.ExitStatus()
		if s := ee.Signal(); s != "" {
			e.Code, e.Signal = -1, signalNames[s]
		}
	case errors.As(werr, &missing):
		// The channel closed without a status: the connection dropped or sshd ended.
		e.Code = -1
		if !killed {
			return e, fmt.Errorf("ssh kernel on %s: %w: %w", t, werr, ErrUnreachable)
		}
	default:
		e.Code = -1
		return e, fmt.Errorf("ssh kernel on %s: %w: %w", t, werr, ErrUnreachable)
	}
	return e, nil
}

// Stdin is the kernel's standard input (the session's). Closing it sends EOF: the stub
// ends its jobs and exits.
func (k *Kernel) Stdin() io.WriteCloser { return k.stdin }

// Stdout is the kernel's standard output from its first frame on: what the login
// profile printed before is skipped. It reaches EOF when the session's stdout ends.
func (k *Kernel) Stdout() io.Reader { return k.stdout }

// Info reports the transport, no host pid, and "user@host:port:<run directory>" as ID.
func (k *Kernel) Info() transports.Info { return k.info }

// Kill ends the kernel in stages: close its stdin and wait StdinGrace; SIGTERM to the
// kernel's process group on the host (a remote command) and wait TermGrace; SIGKILL to
// the group and to every process marked with the kernel's run. The session's end is the
// only confirmation; after it, the host is swept and the run directory removed (see
// Wait). The stages run once, whoever calls Kill and however often; if ctx ends first,
// Kill returns ctx's cause and the stages go on.
func (k *Kernel) Kill(ctx context.Context) error {
	k.killCalled.Store(true)
	return k.ladder.Kill(ctx, fmt.Sprintf("ssh kernel %s", k.cfg.runID))
}

// newLadder sets up the kill stages of Kill: stdin EOF, then TERM and KILL to the
// kernel's process group by remote commands, then (the host does not answer) giving the
// session up; climbing stops once the kernel exited, Kill returns once it is released.
func (k *Kernel) newLadder() {
	k.ladder = &transports.Ladder{Ended: k.exitSeen, Finished: k.finished, Steps: []transports.Step{
		{Act: func() { _ = k.stdin.Close() }, Grace: k.cfg.stdinGrace},
		{Act: func() { k.signal("TERM") }, Grace: k.cfg.termGrace},
		{Act: func() { k.signal("KILL") }, Grace: 5 * time.Second},
		{Act: func() { k.sess.Close() }},
	}}
}

func (k *Kernel) signal(action string) {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, _ = k.cfg.hosts.control(ctx, k.cfg.target, k.cfg.python, k.cfg.runID, action)
}

// Wait blocks until the remote kernel has exited and the host has been swept (every
// process still marked with the run ended, the run directory removed; bounded by 15 s),
// and reports how it ended: the remote exit status, or the signal that ended it. A
// session that ended without a status (the connection dropped) is an ErrUnreachable
// error unless Kill was called. Exit.Killed reports that Kill was called before the end.
func (k *Kernel) Wait() (transports.Exit, error) {
	<-k.finished
	return k.exit, k.err
}
