package ssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/kennel-dev/kennel/transports"
)

// cleanupTimeout bounds the remote sweep after a kernel's end.
const cleanupTimeout = 15 * time.Second

// connSettle bounds how long a session that ended without an exit status waits for its
// connection's end, to tell a lost connection from a session sshd closed.
const connSettle = 2 * time.Second

// eofSettle bounds how long the end of a kernel's stdout waits for the session's end, to
// tell a clean end of the stream from a lost connection.
const eofSettle = 2 * time.Second

type kernelConfig struct {
	hosts      *Hosts
	target     Target
	python     string // the probe's interpreter, for control commands
	runID      string
	runDir     string // the kernel's run directory on the host (job output FIFOs go there)
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
// directory. A session that ends without the kernel's own exit status (its connection
// lost, or sshd gone) is followed by the ladder and the sweep through a fresh connection.
type Kernel struct {
	cfg    kernelConfig
	conn   *hostConn
	sess   *xssh.Session
	stdin  io.WriteCloser
	stdout *kernelStdout
	info   transports.Info
	watch  *transports.Watch
	// streamErr is what Stdout ends with instead of io.EOF: the lost connection, or nil.
	// Set before the watch's Ended closes.
	streamErr error
}

func startKernel(ctx context.Context, hc *hostConn, cfg kernelConfig) (transports.Kernel, error) {
	sess, err := hc.c.NewSession()
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
	k := &Kernel{cfg: cfg, conn: hc, sess: sess, stdin: stdin, info: transports.Info{Transport: Name, ID: cfg.id}}
	k.stdout = &kernelStdout{k: k, r: newSentinelReader(stdout)}
	// Kill's stages: stdin EOF, then TERM and KILL to the kernel's process group by
	// remote commands, then (the host does not answer) giving the session up.
	k.watch = transports.NewWatch(transports.WatchSpec{
		What: "ssh kernel " + cfg.runID,
		Steps: []transports.Step{
			{Act: func() { _ = k.stdin.Close() }, Grace: cfg.stdinGrace},
			{Act: func() { _ = k.control("TERM") }, Grace: cfg.termGrace},
			{Act: func() { _ = k.control("KILL") }, Grace: 5 * time.Second},
			{Act: func() { k.sess.Close() }},
		},
		Reap:    k.reap,
		Release: k.release,
	})
	return k, nil
}

// reap waits for the session's end and works out how the kernel ended: a session that
// ended without the kernel's exit status is a lost one, unless it was the ladder's own
// close of the session (its last step) over a live connection.
func (k *Kernel) reap(seen func() bool) (transports.Exit, error) {
	werr := k.sess.Wait()
	killed := seen()
	exit, status := exitOf(werr)
	if status || (killed && !k.conn.ended()) {
		return exit, nil
	}
	lost := k.lostSession(werr)
	k.streamErr = lost
	if killed {
		return exit, nil // Kill ended the session; the stream still ended by the loss
	}
	return exit, lost
}

// release ends the kernel on the host when its session was lost, and sweeps the host.
func (k *Kernel) release(_ transports.Exit, err error) error {
	defer k.sess.Close()
	// Sweep what the kernel left on the host (cells' children, a job's stray process) and
	// remove its run directory. A host out of reach keeps them: the stub's own EOF
	// shutdown is then all there is. After a lost session the kernel may live on: its
	// stdin EOF comes only once the host's sshd drops the session, and a cell holds the
	// stub for its EOF grace after that. The sweep ends it through a fresh connection:
	// the signal ladder to its process group (checked against the recorded pid and start
	// time), then the sweep of its run's marker.
	if cerr := k.control("CLEANUP"); cerr != nil && k.streamErr != nil {
		return fmt.Errorf("%w; the remote kernel could not be ended (it ends at stdin EOF once the host's sshd drops the session): %w",
			k.streamErr, cerr)
	}
	return err
}

// lostSession returns the error of a session that ended without an exit status: the
// connection's loss (named, with its fault) when the connection ended with it, else the
// session's own end. The connection's end is waited for at most connSettle.
func (k *Kernel) lostSession(werr error) error {
	t := time.NewTimer(connSettle)
	defer t.Stop()
	select {
	case <-k.conn.done:
		return fmt.Errorf("ssh kernel %s: %w", k.cfg.runID, k.conn.lost())
	case <-t.C:
	}
	return fmt.Errorf("ssh kernel %s on %s: session ended without the kernel's exit status: %w: %w",
		k.cfg.runID, k.cfg.target, werr, ErrUnreachable)
}

// signalNames maps the names ssh reports in exit-signal to numbers (Linux numbering).
var signalNames = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "FPE": 8,
	"KILL": 9, "SEGV": 11, "PIPE": 13, "ALRM": 14, "TERM": 15, "USR1": 10, "USR2": 12}

// exitOf reads the session's end: the exit status or signal, and whether the host sent
// one (false: the channel closed without it, or the session failed).
func exitOf(werr error) (transports.Exit, bool) {
	var e transports.Exit
	var ee *xssh.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		e.Code = ee.ExitStatus()
		if s := ee.Signal(); s != "" {
			e.Code, e.Signal = -1, signalNames[s]
		}
	default:
		e.Code = -1
		return e, false
	}
	return e, true
}

// kernelStdout is the kernel's stdout after the sentinel. Where the session's stdout
// ends because its connection was lost, it ends with that error instead of io.EOF.
type kernelStdout struct {
	k       *Kernel
	r       *sentinelReader
	decided bool
	err     error
}

func (s *kernelStdout) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != io.EOF { //nolint:errorlint // io.EOF is returned unwrapped, as Read's contract says
		return n, err
	}
	if !s.decided {
		s.decided = true
		t := time.NewTimer(eofSettle)
		select {
		case <-s.k.watch.Ended():
			s.err = s.k.streamErr
		case <-t.C:
		}
		t.Stop()
	}
	if s.err != nil {
		return n, s.err
	}
	return n, io.EOF
}

// Stdin is the kernel's standard input (the session's). Closing it sends EOF: the stub
// ends its jobs and exits.
func (k *Kernel) Stdin() io.WriteCloser { return k.stdin }

// Stdout is the kernel's standard output from its first frame on: what the login
// profile printed before is skipped. It reaches EOF when the session's stdout ends, or,
// when the connection was lost, ends with an error that names the connection and its
// fault (ErrConnectionLost; ErrKeepalive for a silent peer). Reads are for one goroutine
// at a time.
func (k *Kernel) Stdout() io.Reader { return k.stdout }

// Info reports the transport, no host pid, and "user@host:port:<run directory>" as ID.
func (k *Kernel) Info() transports.Info { return k.info }

// Kill ends the kernel in stages: close its stdin and wait StdinGrace; SIGTERM to the
// kernel's process group on the host (a remote command) and wait TermGrace; SIGKILL to
// the group and to every process marked with the kernel's run. The session's end is the
// only confirmation; after it, the host is swept and the run directory removed (see
// Wait). The stages run once, whoever calls Kill and however often; if ctx ends first,
// Kill returns ctx's cause and the stages go on.
func (k *Kernel) Kill(ctx context.Context) error { return k.watch.Kill(ctx) }

// control runs the control command's action for the kernel's run on its host (through
// a connection of the Hosts, a fresh one when the kernel's was lost).
func (k *Kernel) control(action string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	_, err := k.cfg.hosts.control(ctx, k.cfg.target, k.cfg.python, k.cfg.runID, action)
	return err
}

// Wait blocks until the remote kernel has exited and the host has been swept (every
// process still marked with the run ended, the run directory removed; bounded by 15 s),
// and reports how it ended: the remote exit status, or the signal that ended it.
//
// A session that ended without a status is an ErrUnreachable error unless Kill was
// called: when its connection was lost it matches ErrConnectionLost and names the
// connection (user@host:port) and its fault ("connection lost: EOF", "connection lost:
// keepalive: no answer for 15s"); the kernel has then been ended through a fresh
// connection, and when the host could not be reached for that the error says so too.
// Exit.Killed reports that Kill was called before the end.
func (k *Kernel) Wait() (transports.Exit, error) { return k.watch.Wait() }
